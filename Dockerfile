# The production image of Patchbay: one image, three roles (web, worker, beat).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATCHBAY_DATA_DIR=/data

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY . .
RUN useradd --system --home-dir /data --create-home patchbay \
    && mkdir -p /data && chown patchbay /data \
    && SECRET_KEY=build-only python manage.py collectstatic --noinput -v 0

USER patchbay
EXPOSE 8000
CMD ["python", "-m", "hostapp.core.web", "-b", "0.0.0.0", "-p", "8000", "hostapp.asgi:application"]
