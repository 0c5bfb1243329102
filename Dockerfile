# The A01 repair gym as a Hugging Face Docker Space: python app.py on port 7860, as uid 1000, under tini.
#
#   docker build -t a01-repair-gym .
#   docker run --rm -p 7860:7860 a01-repair-gym                         (as a Space runs it)
#   docker run ... --read-only --tmpfs /tmp:size=512m --cap-drop ALL ...  (hardened: docs/deploy.md)
#
# Build arguments:
#   BASE_IMAGE          the Python 3.11 base (default python:3.11-slim; deploy/standin-base.sh makes a
#                       local stand-in where Docker Hub cannot be reached)
#   WITH_LOCAL_MODELS=1 also install requirements/train.txt (torch, transformers: about 1.5 GB more) and
#                       keep artifacts/models and artifacts/adapters, so the Watch tab can run the shipped
#                       local models live; without it they are listed with what they need.
#   TORCH_INDEX         where the CPU build of torch comes from with WITH_LOCAL_MODELS=1
ARG BASE_IMAGE=python:3.11-slim

# --- the Python environment: the Space's requirements only, in a virtual environment -----------------
FROM ${BASE_IMAGE} AS deps
ARG WITH_LOCAL_MODELS=0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements/ /tmp/requirements/
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-compile -r /tmp/requirements/space.txt \
    && if [ "$WITH_LOCAL_MODELS" = "1" ]; then \
         /opt/venv/bin/pip install --no-compile --index-url "$TORCH_INDEX" torch==2.13.0 \
         && /opt/venv/bin/pip install --no-compile -r /tmp/requirements/train.txt; \
       fi \
    && /opt/venv/bin/pip uninstall -y -q pip \
    && find /opt/venv -depth -type d \( -name tests -o -name __pycache__ \) -path '*/site-packages/*' \
         -exec rm -rf {} + \
    && /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib > /dev/null

# --- the app: only what the Space serves (.dockerignore leaves out tests, docs, CI, build output) ------
FROM ${BASE_IMAGE} AS app
ARG WITH_LOCAL_MODELS=0
COPY . /src
RUN if [ "$WITH_LOCAL_MODELS" != "1" ]; then rm -rf /src/artifacts/models /src/artifacts/adapters; fi \
    && rm -rf /src/requirements \
    && python -m compileall -q /src/app.py /src/envcore /src/ui > /dev/null

# --- the image ---------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && useradd --create-home --uid 1000 user

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    PORT=7860

COPY --from=deps /opt/venv /opt/venv
COPY --from=app --chown=1000:1000 /src /home/user/app
WORKDIR /home/user/app
USER user
EXPOSE 7860
# Healthy while apps are run and graded; /health answers 503 when a sandbox layer is missing and the
# operator has not allowed it (A01_ALLOW_REDUCED_SANDBOX), and says which.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '7860'), timeout=4)"]
# tini is PID 1: it reaps orphaned processes and forwards signals (a Space offers no docker run --init).
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "app.py"]
