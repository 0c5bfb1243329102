# The A01 repair gym as a Hugging Face Docker Space: python app.py on port 7860, as a non-root user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    PORT=7860 \
    PIP_NO_CACHE_DIR=1

RUN useradd --create-home --uid 1000 user
WORKDIR /home/user/app

# The CPU build of torch first, so the pinned requirements do not pull CUDA packages.
COPY requirements.txt .
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
    && pip install -r requirements.txt

COPY --chown=user . .
USER user
EXPOSE 7860
CMD ["python", "app.py"]
