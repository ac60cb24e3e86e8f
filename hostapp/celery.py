"""The Celery application: the worker and beat processes of Patchbay."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")

app = Celery("hostapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
