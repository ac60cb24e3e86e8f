"""Four eyes (PATCHBAY_FOUR_EYES): a call is approved by someone other than the person who
asked for it; without it, the approval form says so on a person's own call."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from pytest_django.fixtures import Settings

from hostapp.calls import actions
from hostapp.calls.models import Call

from .conftest import client_for, requester

pytestmark = pytest.mark.django_db


def own_wipe(person: User) -> Call:
    return actions.start_call("ops__wipe", {"disk": "d1"}, requester(person))


def test_with_four_eyes_the_requester_cannot_approve_their_own_call(
    ops: Any, approver: User, settings: Settings
) -> None:
    settings.PATCHBAY_FOUR_EYES = True
    call = own_wipe(approver)
    with pytest.raises(actions.ApprovalError, match="your own: someone else must approve it"):
        actions.approve(call.pk, approver)
    assert Call.objects.get(pk=call.pk).status == Call.WAITING
    # Their page says why and offers no Approve; they may still deny (withdraw) it.
    page = client_for(approver).get(f"/calls/{call.pk}/").content.decode()
    assert "Your own call:</strong> someone else must approve it" in page
    assert 'class="approve"' not in page and "Deny</button>" in page
    # Through the form too: refused with the reason, nothing moved.
    response = client_for(approver).post(f"/calls/{call.pk}/approve/", follow=True)
    assert "someone else must approve it" in response.content.decode()
    assert Call.objects.get(pk=call.pk).status == Call.WAITING

    other = User.objects.create_user("bea")
    other.user_permissions.set(approver.user_permissions.all())
    assert actions.approve(call.pk, other).status == Call.QUEUED


def test_with_four_eyes_the_requester_may_still_deny_their_own_call(
    ops: Any, approver: User, settings: Settings
) -> None:
    settings.PATCHBAY_FOUR_EYES = True
    call = own_wipe(approver)
    assert actions.deny(call.pk, approver, "asked by mistake").status == Call.DENIED


def test_without_four_eyes_a_persons_own_call_says_so_and_they_may_approve_it(ops: Any, approver: User) -> None:
    call = own_wipe(approver)
    page = client_for(approver).get("/calls/pending/").content.decode()
    assert "Your own call.</strong> You may approve it yourself" in page
    assert 'class="approve"' in page
    # Someone else's call says nothing of the kind.
    other = User.objects.create_user("bea")
    actions.start_call("ops__wipe", {"disk": "d2"}, requester(other))
    assert page.count("Your own call") == 1
    assert "Your own call" not in client_for(approver).get(f"/calls/{call.pk + 1}/").content.decode()
    assert actions.approve(call.pk, approver).status == Call.QUEUED
