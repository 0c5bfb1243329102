"""Versions of what the project writes. Bump one when the meaning of its output changes."""

GENERATOR_VERSION = "a01-gen-4"
"""The template author + code generator. A new version yields a new cache folder."""

CACHE_FORMAT_VERSION = 1
"""Layout of a cache folder (manifest fields, file naming)."""

PACKAGE_VERSION = "0.1.0"
"""The release of the environment (``pyproject.toml``, ``openenv.yaml``, ``/metadata``)."""
