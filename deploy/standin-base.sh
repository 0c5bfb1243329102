#!/usr/bin/env bash
# Build a local stand-in for the python:3.11-slim base image, for machines that cannot reach Docker Hub.
#
#   bash deploy/standin-base.sh [TAG]        (default tag: a01-standin/python:3.11-slim)
#
# Debian bookworm (whose python3 is 3.11) from Debian's own mirror with debootstrap, with python3, venv
# and pip; `python` and `pip` on PATH as in the official image; the machine's CA certificates trusted
# inside (package registries reached through a TLS-inspecting proxy need them). Then
#   docker build --build-arg BASE_IMAGE=a01-standin/python:3.11-slim -t a01-repair-gym .
# Needs root, debootstrap and a running Docker engine. Takes about 3-5 minutes the first time.
set -euo pipefail
tag="${1:-a01-standin/python:3.11-slim}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "standin-base: $tag already exists"
    exit 0
fi
root="$(mktemp -d /tmp/a01-standin.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$mirror"
# The machine's own certificate authorities, trusted in the image as on the machine.
if [ -d /usr/local/share/ca-certificates ]; then
    cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
chroot "$root" update-ca-certificates >/dev/null
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
printf '#!/bin/sh\nexec /usr/bin/python3 -m pip "$@"\n' > "$root/usr/local/bin/pip"
chmod +x "$root/usr/local/bin/pip"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' - "$tag"
echo "standin-base: built $tag"
