"""The Home page's first steps (`hostapp.dashboard.views.first_steps`): call a read-only tool,
approve a call, create an agent token; each ticks itself off from the ledger, and when all
three are done the list folds into one line.

The persona: alice the administrator (tests/conftest.py). Calls are made through the
ledger's own actions against a catalog recorded as a server would list it (never started).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from hostapp.calls import actions, life
from hostapp.calls.actions import Requester
from hostapp.calls.models import Call
from hostapp.catalog.actions import record_tools
from hostapp.catalog.models import Server
from hostapp.dashboard.views import first_steps
from hostapp.gateway.tokens import create_token, revoke_token
from hostapp.mcp.errors import McpFailure

pytestmark = pytest.mark.django_db

NOTHING_DONE = {"read_only_call": False, "approval": False, "token": False, "done": False}
RESULT = {"content": [{"type": "text", "text": "all good"}], "isError": False}


@pytest.fixture(autouse=True)
def ops(db: None) -> Server:
    """A trusted server with a read-only, a write and a destructive tool."""
    server = Server.objects.create(name="ops", trusted=True, command="/bin/true")
    record_tools(
        server,
        [
            {"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
            {
                "name": "restart",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": False, "destructiveHint": False},
            },
            {
                "name": "wipe",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": False, "destructiveHint": True},
            },
        ],
    )
    return server


def cli() -> Requester:
    return Requester(Call.CLI, "cli")


def run(tool_name: str, failure: McpFailure | None = None) -> Call:
    """A call run at once, answered by the server (the call's life, without a server)."""
    call = actions.start_call(tool_name, {}, cli(), run=False)
    assert call.status == Call.RUNNING
    return life.finish(call, None if failure else RESULT, failure, 0.01)


def waiting() -> Call:
    call = actions.start_call("ops__wipe", {}, cli())
    assert call.status == Call.WAITING
    return call


def steps_on_home(client: Client) -> dict[str, bool]:
    """Which steps the Home fragment shows ticked, or `{"done": True}` for the folded line."""
    page = client.get(reverse("home"), {"fragment": "1"}).content.decode()
    if 'id="first-steps-done"' in page:
        assert 'id="first-steps"' not in page
        return {"done": True}
    items = re.findall(r'<li class="step( done)?" data-step="([a-z-]+)">', page)
    return {name: bool(done) for done, name in items}


def test_an_empty_database_has_done_nothing(admin_client: Client) -> None:
    assert first_steps() == NOTHING_DONE
    assert steps_on_home(admin_client) == {"read-only-call": False, "approval": False, "token": False}
    page = admin_client.get(reverse("home")).content.decode()
    assert "First steps" in page
    assert f'href="{reverse("catalog")}?class=read_only"' in page
    assert f'href="{reverse("pending")}"' in page
    assert f'href="{reverse("agents")}"' in page


def test_a_succeeded_read_only_call_ticks_the_first_step(admin_client: Client) -> None:
    run("ops__status")

    assert first_steps() == {**NOTHING_DONE, "read_only_call": True}
    assert steps_on_home(admin_client) == {"read-only-call": True, "approval": False, "token": False}


def test_a_failed_read_only_call_or_a_succeeded_write_does_not(admin_client: Client) -> None:
    run("ops__status", McpFailure(kind="transport", message="the server went away", transient=True))
    write = actions.start_call("ops__restart", {}, cli())
    assert write.status == Call.QUEUED
    # Delivered as a worker would: taken, then answered.
    life.finish(life.move(write, Call.RUNNING, started_at=write.created_at), RESULT, None, 0.01)
    assert Call.objects.get(pk=write.pk).status == Call.SUCCEEDED

    assert first_steps() == NOTHING_DONE


def test_an_approved_call_ticks_the_second_step(admin_client: Client, admin_user: Any) -> None:
    actions.approve(waiting().pk, admin_user)

    assert first_steps() == {**NOTHING_DONE, "approval": True}
    assert steps_on_home(admin_client) == {"read-only-call": False, "approval": True, "token": False}


def test_a_call_waiting_denied_or_expired_is_no_approval(admin_user: Any) -> None:
    waiting()
    actions.deny(waiting().pk, admin_user, "not today")
    expired = waiting()
    Call.objects.filter(pk=expired.pk).update(approval_expires_at=expired.created_at)
    assert actions.expire_waiting() == 1

    assert first_steps() == NOTHING_DONE


def test_an_agent_token_ticks_the_third_step_and_stays_ticked_when_revoked(admin_client: Client) -> None:
    create_token("robot")
    assert first_steps() == {**NOTHING_DONE, "token": True}
    assert steps_on_home(admin_client) == {"read-only-call": False, "approval": False, "token": True}

    revoke_token("robot")
    assert first_steps()["token"] is True


def test_all_three_done_fold_the_list_into_one_line(admin_client: Client, admin_user: Any) -> None:
    run("ops__status")
    actions.approve(waiting().pk, admin_user)
    create_token("robot")

    assert first_steps() == {"read_only_call": True, "approval": True, "token": True, "done": True}
    assert steps_on_home(admin_client) == {"done": True}
    page = admin_client.get(reverse("home")).content.decode()
    assert "First steps done" in page and 'class="steps"' not in page


def test_a_person_who_may_not_create_tokens_is_told_who_does(client: Client, plain_user: Any) -> None:
    client.force_login(plain_user)
    page = client.get(reverse("home")).content.decode()
    assert "An administrator creates tokens on the Agents page." in page
    assert f'href="{reverse("agents")}"' not in page


def test_the_steps_cost_three_queries(admin_client: Client, django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(3):
        first_steps()
