"""Approvers told outside the browser that calls wait for them: a webhook and email, each
optional, a burst grouped into one message. (Being built: the contract is `call_waiting`.)"""

from __future__ import annotations

from .models import Call


def call_waiting(call: Call) -> None:
    """`call` began to wait for a person (called inside or outside a transaction, right after
    the call's row is written). Nothing is sent from here: a message is scheduled, after the
    commit, to group whatever else begins to wait meanwhile."""
