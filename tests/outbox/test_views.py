"""The Outbox and Dead letters pages, their buttons, and `manage.py mcp outbox|redrive|discard`.

Personas: alice the administrator (superuser), olivia a plain user (may look, may not act),
mona who may manage the outbox (`outbox.manage_outbox`) without being staff.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings

from hostapp.calls.models import Call
from hostapp.catalog.models import Server
from hostapp.outbox.models import Action, Attempt
from tests.helpers import PYTHON, REPO, clean_env

from .conftest import Wakeups, action_in, attempt, listed_server, subprocess_database_url

if TYPE_CHECKING:
    from django.contrib.auth.models import User

ALL_STATUSES = [s for s, _ in Action.STATUSES]


@pytest.fixture
def todo(db: None) -> Server:
    return listed_server("todo")


@pytest.fixture
def mona_client(manager: User) -> Client:
    client = Client()
    client.force_login(manager)
    return client


@pytest.fixture
def olivia_client(plain_user: User) -> Client:
    client = Client()
    client.force_login(plain_user)
    return client


@pytest.fixture
def one_of_each(todo: Server) -> dict[str, list[Action]]:
    """Two pending, one being delivered, one done, two dead letters, one unknown, one discarded."""
    made: dict[str, list[Action]] = {s: [] for s in ALL_STATUSES}
    for status in [Action.PENDING, Action.PENDING, Action.LEASED, Action.DONE, Action.DEAD, Action.DEAD]:
        made[status].append(action_in(status))
    made[Action.UNKNOWN].append(action_in(Action.UNKNOWN))
    made[Action.DISCARDED].append(action_in(Action.DISCARDED))
    return made


def counts_on(html: str) -> dict[str, int]:
    cards = re.findall(r'data-status="(\w+)"><h2>[^<]*</h2><p class="figure">(\d*)</p>', html)
    return {status: int(n or 0) for status, n in cards}


def rows_on(html: str) -> dict[int, str]:
    return {int(i): s for i, s in re.findall(r'<tr data-action="(\d+)" data-status="(\w+)">', html)}


def dead_letters_on(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<article class="card dead-letter" data-action="(\d+)">', html)]


def attempt_rows(card_html: str) -> list[tuple[str, str, str]]:
    """(number, worker, outcome) of each attempt in a dead letter's history table."""
    # The third cell is when it started, a <time> with its zone.
    return re.findall(
        r'<tr><td>(\d+)</td><td class="small">([^<]*)</td><td[^>]*>(?:<time [^>]*>[^<]*</time>)?</td><td>(\w+)</td>',
        card_html,
    )


def status_of(action: Action) -> str:
    return Action.objects.get(pk=action.pk).status


def messages_on(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# --- the Outbox page -----------------------------------------------------------------------------


def test_the_outbox_page_counts_actions_by_status(olivia_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    response = olivia_client.get("/outbox/")

    assert response.status_code == 200
    assert counts_on(response.content.decode()) == {
        "pending": 2,
        "leased": 1,
        "done": 1,
        "dead": 2,
        "unknown": 1,
        "discarded": 1,
        "input": 0,
    }
    rows = rows_on(response.content.decode())
    assert rows == {a.pk: status for status, made in one_of_each.items() for a in made}


def test_the_outbox_page_shows_each_actions_key_attempts_and_last_error(
    olivia_client: Client, one_of_each: dict[str, list[Action]]
) -> None:
    dead = one_of_each[Action.DEAD][0]

    html = olivia_client.get("/outbox/").content.decode()

    row = re.search(rf'<tr data-action="{dead.pk}".*?</tr>', html, re.S)
    assert row is not None
    assert dead.idempotency_key in row.group(0)
    assert f"1 / {dead.max_attempts}" in row.group(0)
    assert "the disk is full" in row.group(0)
    assert "todo__add" in row.group(0)


def test_the_outbox_page_filters_by_status(olivia_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    html = olivia_client.get("/outbox/", {"status": "dead"}).content.decode()

    assert rows_on(html) == {a.pk: "dead" for a in one_of_each[Action.DEAD]}
    assert counts_on(html)["pending"] == 2  # the counts stay whole


def test_the_outbox_fragment_is_the_rows_alone(olivia_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    response = olivia_client.get("/outbox/", {"fragment": "1"})

    html = response.content.decode()
    assert "<html" not in html
    assert len(rows_on(html)) == 8


def test_the_outbox_page_costs_the_same_queries_however_many_actions(olivia_client: Client, todo: Server) -> None:
    for status in ALL_STATUSES:
        action_in(status)
    with CaptureQueriesContext(connection) as few:
        assert olivia_client.get("/outbox/").status_code == 200
    for status in ALL_STATUSES * 4:
        action_in(status)
    with CaptureQueriesContext(connection) as many:
        assert olivia_client.get("/outbox/").status_code == 200

    assert len(many) == len(few), [q["sql"] for q in many.captured_queries]


def test_the_outbox_page_needs_a_login(client: Client, db: None) -> None:
    response = client.get("/outbox/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


# --- the Dead letters page -----------------------------------------------------------------------


def test_dead_letters_lists_dead_and_unknown_actions_with_their_attempts(
    olivia_client: Client, one_of_each: dict[str, list[Action]]
) -> None:
    html = olivia_client.get("/outbox/dead/").content.decode()

    expected = sorted((a.pk for a in one_of_each[Action.DEAD] + one_of_each[Action.UNKNOWN]), reverse=True)
    assert dead_letters_on(html) == expected
    unknown = one_of_each[Action.UNKNOWN][0]
    card = re.search(rf'data-action="{unknown.pk}">.*?</article>', html, re.S)
    assert card is not None
    card_html = card.group(0)
    assert unknown.idempotency_key in card_html
    assert "the request may have reached the server" in card_html
    # The attempt history: number, worker, outcome, error.
    attempt = Attempt.objects.get(action=unknown)
    history = attempt_rows(card_html)
    assert history == [(str(attempt.number), "worker-1@test", "unknown")]
    assert "the server exited during the call" in card_html


def test_dead_letters_shows_the_history_of_several_attempts(
    olivia_client: Client, todo: Server, settings: Settings
) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 0  # the retry is due at once
    action = action_in("retry")
    attempt(action.pk, "dead", worker="worker-2@test")

    html = olivia_client.get("/outbox/dead/").content.decode()

    card = re.search(rf'data-action="{action.pk}">.*?</article>', html, re.S)
    assert card is not None
    outcomes = attempt_rows(card.group(0))
    assert outcomes == [("1", "worker-1@test", "retry"), ("2", "worker-2@test", "dead")]


def test_only_people_who_manage_the_outbox_see_its_buttons(
    olivia_client: Client, mona_client: Client, one_of_each: dict[str, list[Action]]
) -> None:
    plain = olivia_client.get("/outbox/dead/").content.decode()
    managing = mona_client.get("/outbox/dead/").content.decode()

    for html, shown in ((plain, False), (managing, True)):
        assert ('action="/outbox/redrive/"' in html) is shown
        assert ('action="/outbox/discard/"' in html) is shown
        assert ("Redrive selected" in html) is shown
    unknown = one_of_each[Action.UNKNOWN][0]
    dead = one_of_each[Action.DEAD][0]
    assert f'action="/outbox/{unknown.pk}/done/"' in managing
    assert f'action="/outbox/{dead.pk}/done/"' not in managing  # only an unknown outcome is marked done


def test_the_action_page_shows_its_attempts(olivia_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    response = olivia_client.get(f"/outbox/{dead.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert dead.idempotency_key in html
    assert "the disk is full" in html
    assert olivia_client.get("/outbox/987654/").status_code == 404


# --- redrive, discard, mark done -----------------------------------------------------------------


def test_mona_redrives_one_dead_letter(
    mona_client: Client, one_of_each: dict[str, list[Action]], wakeups: Wakeups, django_capture_on_commit_callbacks
) -> None:
    dead = one_of_each[Action.DEAD][0]

    with django_capture_on_commit_callbacks(execute=True):
        response = mona_client.post("/outbox/redrive/", {"ids": [dead.pk], "next": "/outbox/dead/"}, follow=True)

    assert response.redirect_chain == [("/outbox/dead/", 302)]
    assert status_of(dead) == Action.PENDING
    assert Action.objects.get(pk=dead.pk).resolved_by == "mona"
    assert messages_on(response) == ["Redriven: 1 action (same idempotency keys)."]
    assert wakeups.deliveries() == [dead.pk]


def test_redrive_in_bulk_reports_what_could_not_be_redriven(
    mona_client: Client, one_of_each: dict[str, list[Action]]
) -> None:
    dead_a, dead_b = one_of_each[Action.DEAD]
    unknown = one_of_each[Action.UNKNOWN][0]
    done = one_of_each[Action.DONE][0]

    response = mona_client.post(
        "/outbox/redrive/", {"ids": [dead_a.pk, dead_b.pk, unknown.pk, done.pk, 987654]}, follow=True
    )

    assert [status_of(a) for a in (dead_a, dead_b, unknown, done)] == ["pending", "pending", "pending", "done"]
    shown = messages_on(response)
    assert shown[0] == "Redriven: 3 actions (same idempotency keys)."
    assert f"action #{done.pk} is done; only dead or unknown ones are redriven" in shown
    assert len(shown) == 3  # and one line for the action that does not exist


def test_mona_discards_in_bulk_with_a_reason(mona_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead_a, dead_b = one_of_each[Action.DEAD]

    response = mona_client.post(
        "/outbox/discard/", {"ids": [dead_a.pk, dead_b.pk], "reason": "sent by hand"}, follow=True
    )

    assert [status_of(a) for a in (dead_a, dead_b)] == ["discarded", "discarded"]
    assert messages_on(response) == ["Discarded: 2 actions."]
    call = Call.objects.get(pk=dead_a.call_id)
    assert call.error == {"kind": "discarded", "message": "discarded: sent by hand"}


def test_a_discard_without_a_reason_discards_nothing(mona_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    response = mona_client.post("/outbox/discard/", {"ids": [dead.pk], "reason": "  "}, follow=True)

    assert status_of(dead) == Action.DEAD
    assert messages_on(response) == ["discarding needs a reason"]


def test_mona_marks_an_unknown_outcome_done(mona_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    unknown = one_of_each[Action.UNKNOWN][0]
    dead = one_of_each[Action.DEAD][0]

    done = mona_client.post(f"/outbox/{unknown.pk}/done/", {"note": "checked the list"}, follow=True)
    refused = mona_client.post(f"/outbox/{dead.pk}/done/", follow=True)

    assert status_of(unknown) == Action.DONE
    assert Action.objects.get(pk=unknown.pk).resolution == "marked done: checked the list"
    assert messages_on(done) == [f"Marked action #{unknown.pk} done."]
    assert status_of(dead) == Action.DEAD
    assert messages_on(refused) == [f"action #{dead.pk} is dead letter; it cannot be marked done"]


def test_the_administrator_may_act_too(admin_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    assert admin_client.post("/outbox/redrive/", {"ids": [dead.pk]}).status_code == 302

    assert status_of(dead) == Action.PENDING


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/outbox/redrive/", {"ids": ["DEAD"]}),
        ("/outbox/discard/", {"ids": ["DEAD"], "reason": "not mine"}),
        ("/outbox/UNKNOWN/done/", {}),
    ],
)
def test_acting_needs_the_manage_outbox_permission(
    olivia_client: Client, one_of_each: dict[str, list[Action]], path: str, data: dict[str, Any]
) -> None:
    dead, unknown = one_of_each[Action.DEAD][0], one_of_each[Action.UNKNOWN][0]
    path = path.replace("UNKNOWN", str(unknown.pk))
    data = {k: [str(dead.pk)] if v == ["DEAD"] else v for k, v in data.items()}

    response = olivia_client.post(path, data)

    assert response.status_code == 403
    assert (status_of(dead), status_of(unknown)) == (Action.DEAD, Action.UNKNOWN)


def test_acting_needs_a_login(client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    response = client.post("/outbox/redrive/", {"ids": [dead.pk]})

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert status_of(dead) == Action.DEAD


@pytest.mark.parametrize("path", ["/outbox/redrive/", "/outbox/discard/"])
def test_the_buttons_only_answer_posts(mona_client: Client, todo: Server, path: str) -> None:
    assert mona_client.get(path).status_code == 405


def test_a_next_elsewhere_is_not_followed(mona_client: Client, one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    response = mona_client.post("/outbox/redrive/", {"ids": [dead.pk], "next": "https://evil.example/phish"})

    assert response["Location"] == "/outbox/dead/"


# --- the command line ----------------------------------------------------------------------------


def mcp(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("mcp", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_mcp_outbox_json_lists_every_action_with_its_fields(one_of_each: dict[str, list[Action]]) -> None:
    rows = json.loads(mcp("outbox", "--json"))

    assert len(rows) == 8
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)
    for row in rows:
        assert set(row) == {
            "id",
            "call_id",
            "tool",
            "status",
            "attempts",
            "next_attempt_at",
            "idempotency_key",
            "last_error",
        }
        action = Action.objects.get(pk=row["id"])
        assert row["call_id"] == action.call_id
        assert row["tool"] == "todo__add"
        assert row["status"] == action.status
        assert row["attempts"] == action.attempts
        assert row["idempotency_key"] == action.idempotency_key
        if action.status == Action.PENDING:
            assert row["next_attempt_at"] == action.next_attempt_at.isoformat()
        else:
            assert row["next_attempt_at"] is None
    by_id = {r["id"]: r for r in rows}
    assert by_id[one_of_each[Action.DEAD][0].pk]["last_error"] == "the disk is full"
    assert by_id[one_of_each[Action.DONE][0].pk]["last_error"] is None


@pytest.mark.parametrize("status", ALL_STATUSES)
def test_mcp_outbox_json_filters_by_status(one_of_each: dict[str, list[Action]], status: str) -> None:
    rows = json.loads(mcp("outbox", "--json", "--status", status))

    assert sorted(r["id"] for r in rows) == sorted(a.pk for a in one_of_each[status])
    assert {r["status"] for r in rows} <= {status}


def test_mcp_outbox_dead_lists_dead_letters_and_unknown_outcomes(one_of_each: dict[str, list[Action]]) -> None:
    rows = json.loads(mcp("outbox", "--json", "--dead"))

    assert sorted(r["id"] for r in rows) == sorted(a.pk for a in one_of_each[Action.DEAD] + one_of_each[Action.UNKNOWN])


def test_mcp_outbox_prints_one_line_per_action(one_of_each: dict[str, list[Action]]) -> None:
    lines = mcp("outbox").splitlines()

    assert len(lines) == 8
    dead = one_of_each[Action.DEAD][0]
    [line] = [ln for ln in lines if ln.startswith(f"#{dead.pk} ")]
    assert "dead" in line and "todo__add" in line and "the disk is full" in line


def test_mcp_outbox_refuses_an_unknown_status(todo: Server) -> None:
    with pytest.raises(CommandError, match="invalid choice"):
        mcp("outbox", "--status", "lost")


def test_mcp_redrive_queues_a_dead_letter_again_with_its_key(one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    out = mcp("redrive", str(dead.pk))

    assert out == f"action #{dead.pk} is queued again with key {dead.idempotency_key}\n"
    action = Action.objects.get(pk=dead.pk)
    assert (action.status, action.resolved_by) == (Action.PENDING, "cli")


def test_mcp_redrive_refuses_what_is_not_dead_or_unknown(one_of_each: dict[str, list[Action]]) -> None:
    done = one_of_each[Action.DONE][0]

    with pytest.raises(CommandError, match=f"action #{done.pk} is done; only dead or unknown ones are redriven"):
        mcp("redrive", str(done.pk))
    with pytest.raises(CommandError, match="no action #987654"):
        mcp("redrive", "987654")


def test_mcp_discard_needs_and_records_a_reason(one_of_each: dict[str, list[Action]]) -> None:
    dead = one_of_each[Action.DEAD][0]

    with pytest.raises(CommandError, match="--reason"):
        mcp("discard", str(dead.pk))
    with pytest.raises(CommandError, match="discarding needs a reason"):
        mcp("discard", str(dead.pk), "--reason", " ")
    assert status_of(dead) == Action.DEAD

    assert mcp("discard", str(dead.pk), "--reason", "duplicate of #12") == f"action #{dead.pk} discarded\n"

    action = Action.objects.get(pk=dead.pk)
    assert (action.status, action.resolution, action.resolved_by) == ("discarded", "discarded: duplicate of #12", "cli")


def test_mcp_resolve_marks_an_unknown_outcome_done(one_of_each: dict[str, list[Action]]) -> None:
    unknown, dead = one_of_each[Action.UNKNOWN][0], one_of_each[Action.DEAD][0]

    assert mcp("resolve", str(unknown.pk), "--note", "seen in the list") == f"action #{unknown.pk} marked done\n"
    with pytest.raises(CommandError, match="cannot be marked done"):
        mcp("resolve", str(dead.pk))

    assert status_of(unknown) == Action.DONE


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_exit_code_says_what_happened() -> None:
    listed_server("todo")
    dead, done = action_in(Action.DEAD), action_in(Action.DONE)
    env = clean_env(DATABASE_URL=subprocess_database_url())

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "manage.py", "mcp", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )

    ok = run("redrive", str(dead.pk))
    refused = run("redrive", str(done.pk))

    assert (ok.returncode, ok.stdout.strip()) == (
        0,
        f"action #{dead.pk} is queued again with key {dead.idempotency_key}",
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"CommandError: action #{done.pk} is done; only dead or unknown ones are redriven"
    ]
    assert status_of(dead) == Action.PENDING
