"""One call per submit: a requester's submit key (the tool page's form, an API client's
Idempotency-Key) sent again answers with the first call and does nothing again."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from hostapp.calls import actions
from hostapp.calls.models import Call
from hostapp.gateway.tokens import create_token
from hostapp.outbox.models import Action

from .conftest import client_for, requester

pytestmark = pytest.mark.django_db


def start(key: str, who: Any = None) -> Call:
    return actions.start_call("ops__restart", {}, who or requester(), submit_key=key)


def test_the_same_key_from_the_same_requester_is_the_first_call(ops: Any) -> None:
    first = start("k-1")
    with pytest.raises(actions.Submitted) as repeat:
        start("k-1")
    assert repeat.value.call.pk == first.pk
    # Nothing was done again: one call, one delivery queued in the outbox.
    assert Call.objects.count() == 1
    assert Action.objects.filter(call=first).count() == 1
    assert Call.objects.get().submit_key == "k-1"


def test_keys_are_the_requesters_own_and_no_key_is_no_promise(ops: Any, plain_user: User) -> None:
    start("shared")
    start("shared", requester(plain_user))  # another requester's key space
    start("")
    start("")
    assert Call.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_two_submits_at_the_same_moment_make_one_call(ops: Any) -> None:
    barrier = threading.Barrier(2)
    outcomes: list[tuple[str, int]] = []

    def submit() -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(("made", start("at-once").pk))
        except actions.Submitted as repeat:
            outcomes.append(("repeat", repeat.call.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(kind for kind, _ in outcomes) == ["made", "repeat"]
    assert len({pk for _, pk in outcomes}) == 1
    assert Call.objects.count() == 1 and Action.objects.count() == 1


def test_the_tool_page_answers_a_form_sent_again_with_its_first_call(ops: Any, plain_user: User) -> None:
    client = client_for(plain_user)
    data = {"arguments": "{}", "submit_key": "form-key-1"}
    first = client.post("/catalog/ops__restart/call/", data, headers={"Accept": "application/json"}).json()
    again = client.post("/catalog/ops__restart/call/", data, headers={"Accept": "application/json"}).json()
    assert first["repeated"] is False and again["repeated"] is True
    assert again["call_id"] == first["call_id"] and again["url"] == f"/calls/{first['call_id']}/"
    # Without the page's script (a plain form, reloaded): to the first call's page, saying so.
    plain = client.post("/catalog/ops__restart/call/", data, follow=True)
    assert plain.redirect_chain[-1][0] == f"/calls/{first['call_id']}/"
    assert f"this is its call, #{first['call_id']}" in plain.content.decode()
    assert Call.objects.count() == 1


def test_the_api_honours_an_idempotency_key(ops: Any) -> None:
    _, token = create_token("robot")
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "api-1"}
    body = json.dumps({"tool": "ops__restart", "arguments": {}})
    client = Client()
    made = client.post("/api/v1/calls", body, content_type="application/json", headers=headers)
    again = client.post("/api/v1/calls", body, content_type="application/json", headers=headers)
    other = client.post(
        "/api/v1/calls", body, content_type="application/json", headers={**headers, "Idempotency-Key": "api-2"}
    )
    assert (made.status_code, again.status_code, other.status_code) == (201, 200, 201)
    assert made.json()["call_id"] == again.json()["call_id"] != other.json()["call_id"]
    assert Call.objects.count() == 2
