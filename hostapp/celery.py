"""The Celery application: the worker and beat processes of Patchbay."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init

from hostapp.core import identity
from hostapp.core.gc_tuning import tune_gc
from hostapp.core.supervisor import dump_stacks_on

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")

app = Celery("hostapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _tune_gc(**kwargs: Any) -> None:
    """The worker refreshes catalogs: collect garbage as the host's processes do. Before
    the pool starts, so that a forked child inherits it."""
    logging.getLogger(__name__).info("garbage collector thresholds %s", tune_gc())


@worker_init.connect
@beat_init.connect
def _dump_stacks_on_request(**kwargs: Any) -> None:
    """Under `manage.py run`, a worker or beat stuck in its stop shows its stacks first."""
    dump_stacks_on()


@worker_init.connect
def _say_worker(**kwargs: Any) -> None:
    """What the worker's pool reports of servers is the worker's (hostapp/core/processes.py)."""
    identity.set_role(identity.WORKER)
