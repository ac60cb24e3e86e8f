"""The Celery application: the worker and beat processes of Patchbay."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")

app = Celery("hostapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _tune_gc(**kwargs: Any) -> None:
    """The worker refreshes catalogs: collect garbage as the host's processes do. Before
    the pool starts, so that a forked child inherits it."""
    from hostapp.core.gc_tuning import tune_gc

    logging.getLogger(__name__).info("garbage collector thresholds %s", tune_gc())
