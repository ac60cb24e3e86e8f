"""The pages of requests for input (hostapp/calls/views.py, input_forms.py): the form made
from a requested schema, the answer page (a form, a URL to open), the Input queue and its
fragment, the navigation badge, and the requests on a call's page.

The personas (tests/calls/conftest.py): alice the admin, whose calls these are; april the
approver, who may answer anyone's; olivia the outsider, who may answer none.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from hostapp.calls import inputs, life
from hostapp.calls.actions import Requester
from hostapp.calls.input_forms import InputForm
from hostapp.calls.models import Call, InputRequest
from hostapp.calls.policy import Decision
from hostapp.catalog.models import Tool
from hostapp.mcp import InputAsk

from .conftest import READ_ONLY, catalog, client_for, tool, tool_def

pytestmark = pytest.mark.django_db

# What server-everything's `trigger-elicitation-request` asks for (its dist/tools/
# trigger-elicitation-request.js, version 2026.8.31): every kind of field the protocol allows
# but a date-time, which `WHEN` adds.
EVERYTHING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"title": "String", "type": "string", "description": "Your full, legal name"},
        "check": {"title": "Boolean", "type": "boolean", "description": "Agree to the terms and conditions"},
        "firstLine": {
            "title": "String with default",
            "type": "string",
            "description": "Favorite first line of a story",
            "default": "It was a dark and stormy night.",
        },
        "email": {
            "title": "String with email format",
            "type": "string",
            "format": "email",
            "description": "Your email address (will be verified, and never shared with anyone else)",
        },
        "homepage": {
            "type": "string",
            "format": "uri",
            "title": "String with uri format",
            "description": "Portfolio / personal website",
        },
        "birthdate": {
            "title": "String with date format",
            "type": "string",
            "format": "date",
            "description": "Your date of birth",
        },
        "integer": {
            "title": "Integer",
            "type": "integer",
            "description": "Your favorite integer (do not give us your phone number, pin, or other sensitive info)",
            "minimum": 1,
            "maximum": 100,
            "default": 42,
        },
        "number": {
            "title": "Number in range 1-1000",
            "type": "number",
            "description": "Favorite number (there are no wrong answers)",
            "minimum": 0,
            "maximum": 1000,
            "default": 3.14,
        },
        "untitledSingleSelectEnum": {
            "type": "string",
            "title": "Untitled Single Select Enum",
            "description": "Choose your favorite friend",
            "enum": ["Monica", "Rachel", "Joey", "Chandler", "Ross", "Phoebe"],
            "default": "Monica",
        },
        "untitledMultipleSelectEnum": {
            "type": "array",
            "title": "Untitled Multiple Select Enum",
            "description": "Choose your favorite instruments",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["Guitar", "Piano", "Violin", "Drums", "Bass"]},
            "default": ["Guitar"],
        },
        "titledSingleSelectEnum": {
            "type": "string",
            "title": "Titled Single Select Enum",
            "description": "Choose your favorite hero",
            "oneOf": [
                {"const": "hero-1", "title": "Superman"},
                {"const": "hero-2", "title": "Green Lantern"},
                {"const": "hero-3", "title": "Wonder Woman"},
            ],
            "default": "hero-1",
        },
        "titledMultipleSelectEnum": {
            "type": "array",
            "title": "Titled Multiple Select Enum",
            "description": "Choose your favorite types of fish",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"const": "fish-1", "title": "Tuna"},
                    {"const": "fish-2", "title": "Salmon"},
                    {"const": "fish-3", "title": "Trout"},
                ]
            },
            "default": ["fish-1"],
        },
        "legacyTitledEnum": {
            "type": "string",
            "title": "Legacy Titled Single Select Enum",
            "description": "Choose your favorite type of pet",
            "enum": ["pet-1", "pet-2", "pet-3", "pet-4", "pet-5"],
            "enumNames": ["Cats", "Dogs", "Birds", "Fish", "Reptiles"],
            "default": "pet-1",
        },
    },
    "required": ["name"],
}
WHEN = {"title": "Meeting time", "type": "string", "format": "date-time"}
MESSAGE = "Please provide inputs for the following fields:"


def schema_with(**extra: Any) -> dict[str, Any]:
    schema = copy.deepcopy(EVERYTHING_SCHEMA)
    schema["properties"].update(extra)
    return inputs.clean_schema(schema)


def running_call(user: User | None) -> Call:
    """A call run at once (status running), by `user` (or the CLI)."""
    if not Tool.objects.filter(exposed_name="s__t").exists():
        catalog("s", tool_def("t", READ_ONLY))
    who = Requester.for_user(user) if user is not None else Requester(Call.CLI, "cli")
    fields = life.new_fields(tool("s__t"), Decision(Call.RUN, ""), who, {}, "d", timezone.now())
    return life.open_call(fields)


def ask_form(call: Call, schema: dict[str, Any] | None = None, message: str = MESSAGE) -> InputRequest:
    params = {"message": message, "requestedSchema": schema or EVERYTHING_SCHEMA}
    return inputs.open_request(call.pk, InputAsk(server="s", params=params, era="legacy"))


def ask_url(call: Call, url: str = "https://auth.example.com/connect?state=abc&x=1") -> InputRequest:
    params = {"mode": "url", "message": "Connect your account.", "url": url, "elicitationId": "e-1"}
    return inputs.open_request(call.pk, InputAsk(server="s", params=params, era="legacy"))


def form_data(form: InputForm, **values: Any) -> dict[str, Any]:
    """POST data for `form` by the schema's names, as a browser sends it."""
    data: dict[str, Any] = {}
    for name, value in values.items():
        key = form.field_for(name)
        assert key is not None, name
        if value is True:
            data[key] = "on"
        elif value is not False:
            data[key] = value
    return data


FULL_ANSWER = {
    "name": "Ada Lovelace",
    "check": True,
    "email": "ada@example.com",
    "homepage": "https://ada.example.com/",
    "birthdate": "1815-12-10",
    "integer": "7",
    "number": "2.5",
    "untitledSingleSelectEnum": "Joey",
    "untitledMultipleSelectEnum": ["Piano", "Drums"],
    "titledSingleSelectEnum": "hero-3",
    "titledMultipleSelectEnum": ["fish-2"],
    "legacyTitledEnum": "pet-2",
    "when": "2026-12-03T10:30",
}


@pytest.fixture
def alice_call(admin_user: User) -> Call:
    return running_call(admin_user)


@pytest.fixture
def outsider(plain_user: User) -> User:
    return plain_user


# --- the form made from a schema -------------------------------------------------------------------


def test_the_form_has_a_field_of_the_right_kind_for_every_property() -> None:
    form = InputForm(schema_with(when=WHEN))
    html = form.as_div()  # only to look at the widgets; pages draw fields themselves

    kinds = {form.names[key]: type(field).__name__ for key, field in form.fields.items()}
    assert kinds == {
        "name": "CharField",
        "check": "BooleanField",
        "firstLine": "CharField",
        "email": "EmailField",
        "homepage": "CharField",
        "birthdate": "DateField",
        "integer": "IntegerField",
        "number": "FloatField",
        "untitledSingleSelectEnum": "ChoiceField",
        "untitledMultipleSelectEnum": "MultipleChoiceField",
        "titledSingleSelectEnum": "ChoiceField",
        "titledMultipleSelectEnum": "MultipleChoiceField",
        "legacyTitledEnum": "ChoiceField",
        "when": "DateTimeField",
    }
    widgets = {form.names[key]: field.widget.input_type for key, field in form.fields.items()}  # type: ignore[attr-defined]
    assert widgets["email"] == "email" and widgets["homepage"] == "url"
    assert widgets["birthdate"] == "date" and widgets["when"] == "datetime-local"
    assert widgets["integer"] == "number" and widgets["check"] == "checkbox"
    assert widgets["untitledMultipleSelectEnum"] == "checkbox" and widgets["untitledSingleSelectEnum"] == "select"
    integer = form.fields[form.field_for("integer") or ""]
    assert 'min="1"' in html and 'max="100"' in html and 'step="any"' in html
    assert integer.required is False and form.fields[form.field_for("name") or ""].required is True


def test_choices_show_their_titles() -> None:
    form = InputForm(schema_with())

    def choices(name: str) -> list[tuple[str, str]]:
        return list(form.fields[form.field_for(name) or ""].choices)  # type: ignore[attr-defined]

    assert choices("legacyTitledEnum")[1:] == [
        ("pet-1", "Cats"),
        ("pet-2", "Dogs"),
        ("pet-3", "Birds"),
        ("pet-4", "Fish"),
        ("pet-5", "Reptiles"),
    ]
    assert choices("titledSingleSelectEnum")[0] == ("", "(none)")
    assert choices("titledSingleSelectEnum")[3] == ("hero-3", "Wonder Woman")
    assert choices("titledMultipleSelectEnum") == [("fish-1", "Tuna"), ("fish-2", "Salmon"), ("fish-3", "Trout")]
    assert choices("untitledSingleSelectEnum")[1] == ("Monica", "Monica")


def test_the_schemas_defaults_are_filled_in() -> None:
    form = InputForm(schema_with())

    initial = {form.names[key]: form[key].value() for key in form.fields}

    assert initial["firstLine"] == "It was a dark and stormy night."
    assert initial["integer"] == 42 and initial["number"] == 3.14
    assert initial["untitledSingleSelectEnum"] == "Monica" and initial["legacyTitledEnum"] == "pet-1"
    assert initial["untitledMultipleSelectEnum"] == ["Guitar"] and initial["titledMultipleSelectEnum"] == ["fish-1"]
    assert initial["name"] is None and initial["check"] is None


def test_a_full_answer_is_the_content_the_server_asked_for() -> None:
    schema = schema_with(when=WHEN)
    form = InputForm(schema, form_data(InputForm(schema), **FULL_ANSWER))

    assert form.is_valid(), form.errors
    content = form.content()

    assert content == {
        "name": "Ada Lovelace",
        "check": True,
        "email": "ada@example.com",
        "homepage": "https://ada.example.com/",
        "birthdate": "1815-12-10",
        "integer": 7,
        "number": 2.5,
        "untitledSingleSelectEnum": "Joey",
        "untitledMultipleSelectEnum": ["Piano", "Drums"],
        "titledSingleSelectEnum": "hero-3",
        "titledMultipleSelectEnum": ["fish-2"],
        "legacyTitledEnum": "pet-2",
        "when": "2026-12-03T10:30:00+00:00",  # the host's time zone (UTC), with its offset
    }
    assert isinstance(content["integer"], int) and isinstance(content["check"], bool)
    assert inputs.check_content(schema, content) == []


def test_empty_optional_fields_are_left_out_and_a_checkbox_always_answers() -> None:
    schema = schema_with()
    form = InputForm(schema, form_data(InputForm(schema), name="Ada"))

    assert form.is_valid(), form.errors
    # The defaults the server gave then apply (inputs.with_defaults, when the answer is sent).
    assert form.content() == {"name": "Ada", "check": False}


@pytest.mark.parametrize(
    ("values", "field", "error"),
    [
        ({"email": "not-an-address"}, "email", "Enter a valid email address."),
        ({"integer": "101"}, "integer", "Ensure this value is less than or equal to 100."),
        ({"integer": "4.5"}, "integer", "Enter a whole number."),
        ({"number": "-1"}, "number", "Ensure this value is greater than or equal to 0."),
        ({"name": ""}, "name", "This field is required."),
        (
            {"untitledMultipleSelectEnum": ["Guitar", "Piano", "Violin", "Drums"]},
            "untitledMultipleSelectEnum",
            "choose at most 3",
        ),
        ({"titledSingleSelectEnum": "hero-9"}, "titledSingleSelectEnum", "Select a valid choice."),
        ({"birthdate": "10/12/1815x"}, "birthdate", "Enter a valid date."),
        ({"homepage": "no scheme"}, "homepage", "must be a URI"),
        ({"when": "tomorrow"}, "when", "Enter a valid date/time."),
    ],
)
def test_an_answer_that_breaks_the_schema_is_refused_next_to_its_field(
    values: dict[str, Any], field: str, error: str
) -> None:
    schema = schema_with(when=WHEN)
    form = InputForm(schema, form_data(InputForm(schema), **{**FULL_ANSWER, **values}))

    assert not form.is_valid()
    key = form.field_for(field)
    assert key is not None
    assert any(error in e for e in form.errors[key]), form.errors
    assert list(form.errors) == [key]


def test_lengths_are_checked() -> None:
    schema = inputs.clean_schema(
        {"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 5}}}
    )
    short = InputForm(schema, {"field_0": "ab"})
    long = InputForm(schema, {"field_0": "abcdef"})

    assert not short.is_valid() and "at least 3 characters" in short.errors["field_0"][0]
    assert not long.is_valid() and "at most 5 characters" in long.errors["field_0"][0]
    assert 'minlength="3"' in str(short["field_0"]) and 'maxlength="5"' in str(short["field_0"])


# --- the answer page: a form -----------------------------------------------------------------------


def page_of(client: Client, row: InputRequest) -> str:
    response = client.get(f"/calls/inputs/{row.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_answer_page_shows_the_server_beside_its_message_and_the_whole_form(
    alice_call: Call, admin_client: Client
) -> None:
    row = ask_form(alice_call)

    response = admin_client.get(f"/calls/inputs/{row.pk}/")
    page = response.content.decode()

    assert '<span class="input-server">s</span> asks' in page
    assert f'<blockquote class="input-message prewrap" id="input-message">{MESSAGE}</blockquote>' in page
    form = response.context["form"]
    for key in form.fields:
        assert f'name="{key}"' in page
    for label in ("String", "Boolean", "Integer", "Untitled Multiple Select Enum", "Legacy Titled Single Select Enum"):
        assert f'class="sf-label">{label}</' in page
    assert "Cats</option>" in page and "Wonder Woman</option>" in page and " Tuna</label>" in page
    assert 'value="It was a dark and stormy night."' in page
    assert page.count('<span class="sf-required">required</span>') == 1
    assert "Your full, legal name" in page and "A whole number, 1 to 100." in page
    assert 'value="accept">Submit</button>' in page
    assert 'value="decline" class="secondary" formnovalidate>Decline</button>' in page
    assert 'value="cancel" class="secondary" formnovalidate>Cancel</button>' in page
    assert 'id="input-sensitive"' not in page


def test_accepting_answers_the_request_and_the_call_runs_again(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(alice_call)
    assert Call.objects.get(pk=alice_call.pk).status == Call.INPUT
    data = form_data(InputForm(row.requested_schema), name="Ada", email="ada@example.com", integer="7")

    response = admin_client.post(f"/calls/inputs/{row.pk}/", {**data, "action": "accept"}, follow=True)

    assert response.redirect_chain == [(f"/calls/{alice_call.pk}/", 302)]
    assert [str(m) for m in response.context["messages"]] == [
        f"Answered s's request for input of call #{alice_call.pk}."
    ]
    answered = InputRequest.objects.get(pk=row.pk)
    assert answered.status == InputRequest.ACCEPTED
    assert answered.content["name"] == "Ada" and answered.content["integer"] == 7
    assert answered.answered_by_name == "alice" and answered.answered_via == InputRequest.PERSON
    assert Call.objects.get(pk=alice_call.pk).status == Call.RUNNING


@pytest.mark.parametrize(("action", "word"), [("decline", "Declined"), ("cancel", "Cancelled")])
def test_declining_or_cancelling_needs_no_valid_form(
    alice_call: Call, admin_client: Client, action: str, word: str
) -> None:
    row = ask_form(alice_call)

    # Nothing filled in, not even the required name: it is not an answer.
    response = admin_client.post(f"/calls/inputs/{row.pk}/", {"action": action, "next": "/calls/inputs/"}, follow=True)

    assert response.redirect_chain == [("/calls/inputs/", 302)]
    assert [str(m) for m in response.context["messages"]] == [f"{word} s's request for input of call #{alice_call.pk}."]
    answered = InputRequest.objects.get(pk=row.pk)
    assert answered.status == action and answered.content is None
    assert Call.objects.get(pk=alice_call.pk).status == Call.RUNNING


def test_a_refused_answer_shows_the_errors_next_to_the_fields_and_keeps_the_request_open(
    alice_call: Call, admin_client: Client
) -> None:
    row = ask_form(alice_call)
    form = InputForm(row.requested_schema)
    data = form_data(form, name="Ada", email="nope", integer="500")

    response = admin_client.post(f"/calls/inputs/{row.pk}/", {**data, "action": "accept"})

    assert response.status_code == 400
    page = response.content.decode()
    assert "Enter a valid email address." in page and "less than or equal to 100" in page
    email = page.split('data-property="email"', 1)[1].split('class="sf-field', 1)[0]
    assert 'aria-invalid="true"' in email and "Enter a valid email address." in email
    assert 'value="Ada"' in page  # what was typed stays
    assert InputRequest.objects.get(pk=row.pk).status == InputRequest.OPEN
    assert Call.objects.get(pk=alice_call.pk).status == Call.INPUT


def test_an_approver_may_answer_someone_elses_request(alice_call: Call, approver_client: Client) -> None:
    row = ask_form(alice_call)

    approver_client.post(f"/calls/inputs/{row.pk}/", {"action": "decline"})

    assert InputRequest.objects.get(pk=row.pk).answered_by_name == "april"


def test_an_outsider_cannot_answer(alice_call: Call, outsider_client: Client) -> None:
    row = ask_form(alice_call)
    data = form_data(InputForm(row.requested_schema), name="Mallory")

    for action in ("accept", "decline", "cancel"):
        response = outsider_client.post(f"/calls/inputs/{row.pk}/", {**data, "action": action})
        assert response.status_code == 403

    assert InputRequest.objects.get(pk=row.pk).status == InputRequest.OPEN
    page = page_of(outsider_client, row)
    assert 'id="input-form"' not in page and 'name="field_0"' not in page
    assert "Only the call's requester and users with the approve permission can answer it" in page


def test_a_request_answered_meanwhile_takes_no_second_answer(
    alice_call: Call, admin_user: User, admin_client: Client
) -> None:
    row = ask_form(alice_call)
    inputs.answer(row.pk, "decline", person=admin_user)

    response = admin_client.post(f"/calls/inputs/{row.pk}/", {"action": "cancel"}, follow=True)

    assert response.redirect_chain == [(f"/calls/inputs/{row.pk}/", 302)]
    assert [str(m) for m in response.context["messages"]] == [
        f"input request #{row.pk} is declined: it takes no answer"
    ]
    assert InputRequest.objects.get(pk=row.pk).status == InputRequest.DECLINED


def test_an_unknown_action_is_a_400(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(alice_call)

    assert admin_client.post(f"/calls/inputs/{row.pk}/", {"action": "maybe"}).status_code == 400
    assert InputRequest.objects.get(pk=row.pk).status == InputRequest.OPEN


def test_a_form_that_asks_for_a_secret_is_shown_with_a_warning(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(
        alice_call, {"type": "object", "properties": {"api_key": {"type": "string"}}}, message="Your API key, please."
    )
    assert row.sensitive

    page = page_of(admin_client, row)

    assert "This seems to ask for a password, a token or a key." in page
    assert "is stored in the call's record" in page


def test_the_servers_words_are_escaped(alice_call: Call, admin_client: Client) -> None:
    schema = {
        "type": "object",
        "properties": {
            "<b>x</b>": {
                "type": "string",
                "title": "<img src=x onerror=alert(1)>",
                "description": "<script>alert(2)</script>",
                "enum": ["a"],
                "enumNames": ["<i>A</i>"],
            }
        },
    }
    row = ask_form(alice_call, schema, message="<script>alert(3)</script>")

    page = page_of(admin_client, row)

    assert "<script>alert" not in page and "<img src=x" not in page and "<i>A</i>" not in page
    assert "<b>x</b>" not in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;i&gt;A&lt;/i&gt;</option>" in page


def test_an_ended_request_shows_how_it_ended_and_the_answer_only_to_those_who_may_see_it(
    alice_call: Call, admin_user: User, admin_client: Client, outsider_client: Client
) -> None:
    row = ask_form(alice_call)
    inputs.answer(row.pk, "accept", {"name": "Ada Secretname", "legacyTitledEnum": "pet-2"}, person=admin_user)

    mine = page_of(admin_client, row)
    theirs = page_of(outsider_client, row)

    for page in (mine, theirs):
        assert "<strong>Answered</strong> by alice at" in page
        assert 'id="input-form"' not in page
    assert "<dt>String</dt><dd>Ada Secretname</dd>" in mine
    assert "<dt>Legacy Titled Single Select Enum</dt><dd>Dogs</dd>" in mine
    assert "Secretname" not in theirs and 'id="input-content"' not in theirs


def test_the_answer_pages_fragment_is_its_state_only(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(alice_call)

    response = admin_client.get(f"/calls/inputs/{row.pk}/?fragment=1")

    assert [t.name for t in response.templates][0] == "calls/_input_state.html"
    page = response.content.decode()
    assert "<html" not in page and 'id="input-form"' not in page
    assert 'data-status="open"' in page


# --- the answer page: a URL to open ---------------------------------------------------------------


def test_a_url_request_shows_the_whole_url_and_its_host_and_opens_nothing_by_itself(
    alice_call: Call, admin_client: Client
) -> None:
    row = ask_url(alice_call)

    page = page_of(admin_client, row)

    assert '<strong class="input-host" id="input-host">auth.example.com</strong>' in page
    assert '<pre class="input-url" id="input-url">https://auth.example.com/connect?state=abc&amp;x=1</pre>' in page
    assert (
        '<a class="button" id="input-open-url" href="https://auth.example.com/connect?state=abc&amp;x=1" '
        'target="_blank" rel="noopener noreferrer">Open auth.example.com in a new tab</a>' in page
    )
    assert "<iframe" not in page and "window.open" not in page and 'http-equiv="refresh"' not in page
    assert 'value="accept">I have done it</button>' in page


def test_a_url_with_a_name_before_its_host_says_where_it_really_goes(alice_call: Call, admin_client: Client) -> None:
    row = ask_url(alice_call, "https://bank.example.com@evil.example.net/login")

    page = page_of(admin_client, row)

    assert '<strong class="input-host" id="input-host">evil.example.net</strong>' in page
    assert "whatever comes before the @" in page


def test_an_internationalised_host_is_also_shown_in_plain_letters(alice_call: Call, admin_client: Client) -> None:
    row = ask_url(alice_call, "https://pаypal.example/")  # a Cyrillic "а"

    page = page_of(admin_client, row)

    assert "<code>xn--pypal-4ve.example</code>" in page


def test_having_opened_the_url_is_an_accept(alice_call: Call, admin_client: Client) -> None:
    row = ask_url(alice_call)

    response = admin_client.post(f"/calls/inputs/{row.pk}/", {"action": "accept"})

    assert response.status_code == 302
    answered = InputRequest.objects.get(pk=row.pk)
    assert answered.status == InputRequest.ACCEPTED and answered.content is None
    assert Call.objects.get(pk=alice_call.pk).status == Call.RUNNING


def test_an_outsider_sees_no_url_to_open(alice_call: Call, outsider_client: Client) -> None:
    row = ask_url(alice_call)

    page = page_of(outsider_client, row)

    assert "auth.example.com/connect" not in page and 'id="input-open-url"' not in page


# --- the Input queue ----------------------------------------------------------------------------------


def test_the_queue_lists_the_open_requests_oldest_first_with_the_server_beside_the_message(
    alice_call: Call, admin_user: User, admin_client: Client
) -> None:
    first = ask_form(alice_call, message="First, your name.")
    second = ask_url(running_call(admin_user))
    done = ask_form(running_call(admin_user))
    inputs.answer(done.pk, "decline", person=admin_user)

    response = admin_client.get("/calls/inputs/")
    page = response.content.decode()

    assert [r.pk for r in response.context["rows"]] == [first.pk, second.pk]
    assert (
        '<strong class="input-server">s</strong>: <span class="input-message prewrap">First, your name.</span>' in page
    )
    assert f'href="/calls/inputs/{first.pk}/?next=/calls/inputs/"' in page
    assert f'<a href="/calls/{alice_call.pk}/">#{alice_call.pk}</a>' in page
    assert "Call asked by <strong>alice</strong> (user)" in page
    assert "open a URL" in page and "expires in " in page


def test_the_queue_lists_only_what_the_user_may_answer(
    admin_user: User, approver_client: Client, outsider: User
) -> None:
    alices = ask_form(running_call(admin_user))
    olivias = ask_form(running_call(outsider))
    clis = ask_form(running_call(None))

    def listed(client: Client) -> list[int]:
        return [r.pk for r in client.get("/calls/inputs/").context["rows"]]

    assert listed(client_for(outsider)) == [olivias.pk]
    assert listed(approver_client) == [alices.pk, olivias.pk, clis.pk]
    assert listed(client_for(User.objects.create_user("nobody"))) == []


def test_the_queue_fragment_is_the_rows_only(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(alice_call)

    response = admin_client.get("/calls/inputs/?fragment=1")

    assert [t.name for t in response.templates][0] == "calls/_input_rows.html"
    assert b"<html" not in response.content
    assert f'data-input="{row.pk}"'.encode() in response.content


def test_the_queue_page_is_re_fetched_on_input_and_call_events(admin_client: Client) -> None:
    page = admin_client.get("/calls/inputs/").content.decode()

    assert 'data-live-fragment="/calls/inputs/?fragment=1" data-live-on="input.changed call.changed"' in page
    assert '<p class="empty">No server is waiting for your input.</p>' in page


def test_the_queue_costs_the_same_queries_for_many_requests(approver_client: Client, admin_user: User) -> None:
    ask_form(running_call(admin_user))
    with CaptureQueriesContext(connection) as one:
        approver_client.get("/calls/inputs/")
    for _ in range(5):
        ask_form(running_call(admin_user))

    with CaptureQueriesContext(connection) as many:
        response = approver_client.get("/calls/inputs/")

    assert len(response.context["rows"]) == 6
    assert len(many) == len(one)


# --- the navigation badge ----------------------------------------------------------------------------


def test_the_input_badge_counts_open_requests(alice_call: Call, admin_user: User, outsider_client: Client) -> None:
    ask_form(alice_call)
    ask_url(running_call(admin_user))
    inputs.answer(ask_form(running_call(admin_user)).pk, "cancel", person=admin_user)

    response = outsider_client.get("/calls/")

    assert response.context["nav_input"] == 2
    page = response.content.decode()
    assert '<span class="nav-badge" id="nav-input" title="servers waiting for a person\'s input">2</span>' in page
    assert '<a href="/calls/inputs/">Input <span class="nav-badge" id="nav-input"' in page


def test_the_badges_of_approvals_and_input_are_one_query(
    alice_call: Call, outsider_client: Client, django_assert_num_queries: Any
) -> None:
    from hostapp.dashboard.context_processors import navigation

    ask_form(alice_call)
    request = outsider_client.get("/calls/").wsgi_request

    with django_assert_num_queries(2):  # approvals and input; dead letters
        context = navigation(request)

    assert (context["nav_pending"], context["nav_input"], context["nav_dead"]) == (0, 1, 0)


def test_no_badge_shows_without_open_requests(outsider_client: Client) -> None:
    page = outsider_client.get("/calls/").content.decode()

    assert 'id="nav-input" title="servers waiting for a person\'s input" hidden>0</span>' in page


def test_the_input_page_lights_up_its_section(alice_call: Call, admin_client: Client) -> None:
    row = ask_form(alice_call)

    assert admin_client.get(f"/calls/inputs/{row.pk}/").context["nav_current"] == "inputs"


# --- a call's page ------------------------------------------------------------------------------------


def test_a_calls_page_lists_its_requests_for_input(alice_call: Call, admin_user: User, admin_client: Client) -> None:
    answered = ask_form(alice_call, message="Your name?")
    inputs.answer(answered.pk, "accept", {"name": "Ada"}, person=admin_user)
    still_open = ask_url(alice_call)

    page = admin_client.get(f"/calls/{alice_call.pk}/").content.decode()

    assert '<span class="badge call-input" id="call-status" data-status="input">waiting for input</span>' in page
    assert (
        '<span class="badge input-accept">answered</span> <strong class="input-server">s</strong> asks (form)' in page
    )
    assert '<blockquote class="input-message prewrap">Your name?</blockquote>' in page
    assert "Answered by alice at" in page
    assert "<dt>String</dt><dd>Ada</dd>" in page
    assert f'<a href="/calls/inputs/{still_open.pk}/">Answer</a>' in page
    assert '<span class="badge input-open">waiting for an answer</span>' in page


def test_an_outsider_sees_the_requests_on_a_calls_page_but_not_the_answers(
    alice_call: Call, admin_user: User, outsider_client: Client
) -> None:
    row = ask_form(alice_call, message="Your name?")
    inputs.answer(row.pk, "accept", {"name": "Ada Secretname"}, person=admin_user)

    page = outsider_client.get(f"/calls/{alice_call.pk}/").content.decode()

    assert "Your name?" in page and "Answered by alice at" in page
    assert "Secretname" not in page and "input-content" not in page
    assert f'<a href="/calls/inputs/{row.pk}/">Details</a>' in page


def test_a_calls_page_is_re_fetched_on_input_events(alice_call: Call, admin_client: Client) -> None:
    page = admin_client.get(f"/calls/{alice_call.pk}/").content.decode()

    assert 'data-live-on="call.changed input.changed"' in page
    assert 'id="call-inputs"' not in page  # no request, no section


def test_the_calls_filter_offers_waiting_for_input(alice_call: Call, outsider_client: Client) -> None:
    ask_form(alice_call)

    response = outsider_client.get("/calls/?status=input")

    assert [c.pk for c in response.context["calls"]] == [alice_call.pk]
    page = response.content.decode()
    assert '<option value="input" selected>waiting for input</option>' in page
    assert '<span class="badge call-input">waiting for input</span>' in page
