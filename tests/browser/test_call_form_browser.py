"""The tool page's call form in a real browser (issue 25, item 5): a form that reads like
the tool (static/js/schema-form.js), not like a JSON editor.

The bundled tools' schemas (pydantic's: titles, descriptions, defaults, nullable fields)
are used as they are; what no bundled tool has (nested objects, arrays, choices with
titles, fields only JSON can say) is drawn on a tool page from a schema the test passes in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# What no bundled tool has; drawn with PatchbaySchemaForm.render on a tool page.
RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "planArguments",
    "required": ["tripName", "travellers", "start"],
    "properties": {
        "tripName": {"type": "string", "minLength": 3, "description": "What to call it"},
        "max_nights": {"type": "integer", "minimum": 1, "maximum": 30, "default": 7},
        "start": {"type": "string", "format": "date"},
        "contact": {"type": ["string", "null"], "format": "email"},
        "pace": {"oneOf": [{"const": "slow", "title": "Slow and easy"}, {"const": "fast", "title": "Fast"}]},
        "pets": {"type": "boolean"},
        "insured": {"type": "boolean", "default": True},
        "meals": {"type": "array", "items": {"enum": ["breakfast", "dinner"]}, "uniqueItems": True},
        "tags": {"type": "array", "items": {"type": "string"}},
        "travellers": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/traveller"}},
        "budget": {
            "type": "object",
            "description": "Leave empty for no limit",
            "required": ["amount"],
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0},
                "currency": {"default": "EUR", "enum": ["EUR", "CHF"]},
            },
        },
        "extra": {"anyOf": [{"type": "string"}, {"type": "integer"}], "description": "A word or a number"},
        "route": {"$ref": "#/$defs/stop"},
        "notes": {"$ref": "https://schemas.example/notes.json"},
    },
    "$defs": {
        "traveller": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "title": "Full name"}, "age": {"type": ["integer", "null"]}},
        },
        "stop": {"type": "object", "properties": {"place": {"type": "string"}, "next": {"$ref": "#/$defs/stop"}}},
    },
}


def draw(page: Page, schema: dict[str, Any]) -> Locator:
    """`schema` drawn by the renderer into a box of its own on the (tool) page; the box."""
    page.evaluate(
        """text => {
            const box = document.createElement("form");
            box.id = "drawn";
            box.noValidate = true;
            document.querySelector("main").prepend(box);
            window.drawn = PatchbaySchemaForm.render(box, JSON.parse(text));
        }""",
        json.dumps(schema),
    )
    return page.locator("#drawn")


def value(page: Page) -> Any:
    return page.evaluate("window.drawn.getValue()")


def hint_of(page: Page, field: Locator) -> str:
    """The text of the first element the field is described by (its hint)."""
    first = (field.get_attribute("aria-describedby") or "").split()[0]
    return page.locator(f"[id='{first}']").text_content() or ""


def error_beside(page: Page, field: Locator) -> Locator:
    return page.locator(f"[id='{field.get_attribute('id')}-error']")


def call_arguments(page: Page) -> Any:
    """The arguments of the call just made from the tool page, as its detail shows them."""
    expect(page.locator("#call-outcome-link")).to_have_attribute("href", re.compile(r"^/calls/\d+/$"))
    expect(page.locator("#call-status")).to_have_attribute("data-status", "succeeded")
    return json.loads(page.locator("#call-arguments").text_content() or "")


def test_the_labels_are_the_titles_and_the_descriptions_are_hints(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/mailbox__search/")
    fields = page.locator("#call-fields")
    query = fields.get_by_label("Query", exact=True)
    expect(query).to_have_value("")
    assert hint_of(page, query) == "Text to look for; empty matches all"
    limit = fields.get_by_label("Limit", exact=True)
    expect(limit).to_have_value("10")  # its default, filled in
    expect(limit).to_have_attribute("type", "number")
    assert (limit.get_attribute("min"), limit.get_attribute("max"), limit.get_attribute("step")) == ("1", "50", "1")
    # No editor chrome: not the schema's own title, no property buttons, no type switcher.
    expect(fields).not_to_contain_text("searchArguments")
    expect(fields).not_to_contain_text("Object Properties")
    expect(fields.locator("button")).to_have_count(0)
    # Each control has a label of its own.
    labels = fields.evaluate(
        """box => Array.from(box.querySelectorAll("input, select, textarea"))
            .map(c => [c.id, c.labels.length, c.labels[0] && c.labels[0].textContent])"""
    )
    assert [(n, text) for _, n, text in labels] == [(1, "Query"), (1, "Folder"), (1, "Limit")]
    assert len({i for i, _, _ in labels}) == 3
    expect(fields.locator(".sf-required")).to_have_count(0)

    page.goto("/catalog/mailbox__delete/")
    message_id = page.locator("#call-fields").get_by_label("Message Id", exact=True)
    expect(message_id).to_have_attribute("aria-required", "true")
    expect(page.locator("#call-fields .sf-required")).to_have_text(["required"])


def test_a_nullable_field_is_one_optional_input_and_defaults_show_as_json(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/mailbox__search/")
    # `folder` is anyOf [enum, null]: one select, "—" (not set) first, nothing chosen.
    folder = page.locator("#call-fields").get_by_label("Folder", exact=True)
    expect(folder).to_have_value("")
    expect(folder.locator("option")).to_have_text(["\u2014", "inbox", "archive", "sent"])
    expect(page.locator("#call-fields select")).to_have_count(1)
    # The schema tree says the defaults as JSON, not as Python.
    tree = page.locator("h2:text-is('Input') + ul.tree")
    expect(tree).to_contain_text("default: null")
    expect(tree).to_contain_text('default: ""')
    expect(tree).to_contain_text("default: 10")
    expect(tree).not_to_contain_text("None")

    page.goto("/catalog/calendar__list/")
    fields = page.locator("#call-fields")
    expect(page.locator("h2:text-is('Input') + ul.tree")).to_contain_text("default: false")
    # `start` is anyOf [string, null]: one text input, empty.
    start = fields.get_by_label("Start", exact=True)
    expect(start).to_have_attribute("type", "text")
    expect(start).to_have_value("")
    # A boolean with a default is a checkbox, set as the default says.
    expect(fields.get_by_label("Include Cancelled", exact=True)).not_to_be_checked()
    expect(fields.locator("input, select, textarea")).to_have_count(3)


def test_an_error_shows_once_the_field_is_left_and_goes_once_it_is_fixed(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/tasks__add/")
    title = page.locator("#call-fields").get_by_label("Title", exact=True)
    error = error_beside(page, title)
    # Nothing is wrong before anything was typed.
    expect(page.locator("#call-fields .sf-error:visible")).to_have_count(0)
    expect(title).not_to_have_attribute("aria-invalid", "true")

    title.focus()
    title.blur()
    expect(error).to_have_text("required")
    expect(title).to_have_attribute("aria-invalid", "true")
    assert f"{title.get_attribute('id')}-error" in (title.get_attribute("aria-describedby") or "").split()

    title.press_sequentially("B")
    expect(error).to_be_hidden()
    expect(title).not_to_have_attribute("aria-invalid", "true")
    assert "-error" not in (title.get_attribute("aria-describedby") or "")

    # A submit with a required field empty: the error beside it and in the list; no call.
    title.fill("")
    notes = page.locator("#call-fields").get_by_label("Notes", exact=True)
    expect(notes).to_have_js_property("tagName", "TEXTAREA")  # a long text
    page.locator("#call-submit").click()
    expect(error).to_have_text("required")
    expect(page.locator("#call-errors li")).to_have_text(["Title: required"])
    expect(title).to_be_focused()
    expect(page.locator("#call-outcome")).to_be_hidden()
    title.fill("Buy stamps")
    expect(error).to_be_hidden()


def test_the_form_sends_what_it_shows_and_the_call_succeeds(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/mailbox__search/")
    fields = page.locator("#call-fields")
    fields.get_by_label("Query", exact=True).fill("invoice")
    fields.get_by_label("Folder", exact=True).select_option("inbox")
    fields.get_by_label("Limit", exact=True).fill("5")
    page.get_by_role("button", name="Call", exact=True).click()
    assert call_arguments(page) == {"query": "invoice", "folder": "inbox", "limit": 5}
    expect(page.locator("#call-result")).to_contain_text("Your invoice INV-20417 is ready")

    # Empty optional fields are left out: the defaults (limit 10) are sent as shown.
    page.goto("/catalog/mailbox__search/")
    page.get_by_role("button", name="Call", exact=True).click()
    assert call_arguments(page) == {"limit": 10}


def test_raw_json_and_the_form_round_trip(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/mailbox__search/")
    fields = page.locator("#call-fields")
    raw = page.locator("#raw-arguments")
    toggle = page.locator("#toggle-raw")
    fields.get_by_label("Query", exact=True).fill("budget")
    fields.get_by_label("Folder", exact=True).select_option("archive")

    toggle.click()
    expect(fields).to_be_hidden()
    expect(raw).to_be_visible()
    expect(toggle).to_have_text("Use the form")
    assert json.loads(raw.input_value()) == {"query": "budget", "folder": "archive", "limit": 10}

    raw.fill(json.dumps({"query": "lunch", "limit": 3}))
    toggle.click()
    expect(fields).to_be_visible()
    expect(toggle).to_have_text("Edit raw JSON")
    expect(fields.get_by_label("Query", exact=True)).to_have_value("lunch")
    expect(fields.get_by_label("Folder", exact=True)).to_have_value("")
    expect(fields.get_by_label("Limit", exact=True)).to_have_value("3")

    # What the form cannot show keeps the raw JSON, and says why.
    toggle.click()
    raw.fill(json.dumps({"query": "lunch", "colour": "red"}))
    toggle.click()
    expect(raw).to_be_visible()
    expect(page.locator("#call-errors")).to_contain_text("colour: the form has no field for this key")
    # Sent as it is from the raw JSON: the server answers with what it checks.
    raw.fill(json.dumps({"query": "lunch"}))
    toggle.click()
    expect(fields).to_be_visible()
    expect(page.locator("#call-errors")).to_be_hidden()
    page.get_by_role("button", name="Call", exact=True).click()
    assert call_arguments(page) == {"query": "lunch"}


def test_the_renderer_draws_nested_objects_arrays_choices_and_json_fields(login: Callable[..., Page]) -> None:
    page = login()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto("/catalog/mailbox__search/")
    form = draw(page, RICH_SCHEMA)

    # Labels: titles, else the keys in words; nested objects are fieldsets with a legend.
    expect(form.get_by_label("Trip name", exact=True)).to_be_visible()
    expect(form.get_by_label("Max nights", exact=True)).to_have_value("7")
    expect(form.get_by_label("Start", exact=True)).to_have_attribute("type", "date")
    expect(form.get_by_label("Contact", exact=True)).to_have_attribute("type", "email")
    expect(form.locator("legend")).to_contain_text(["Meals", "Tags", "Travellers", "Budget", "Route"])
    expect(form).not_to_contain_text("planArguments")
    # A choice with titles; a boolean that may be unset is a select; one with a default a checkbox.
    expect(form.get_by_label("Pace", exact=True).locator("option")).to_have_text(["\u2014", "Slow and easy", "Fast"])
    expect(form.get_by_label("Pets", exact=True).locator("option")).to_have_text(["not set", "Yes", "No"])
    expect(form.get_by_label("Insured", exact=True)).to_be_checked()
    # What a form cannot say is JSON, for that one field: a choice of types, a recursive
    # reference, a remote one (never fetched).
    expect(form.get_by_label("Extra (JSON)", exact=True)).to_be_visible()
    expect(form.get_by_label("Next (JSON)", exact=True)).to_be_visible()
    expect(form.get_by_label("Notes (JSON)", exact=True)).to_be_visible()
    assert not [u for u in requests if "schemas.example" in u]

    # A required array with minItems starts with its rows; Add and Remove change them.
    travellers = form.locator("fieldset.sf-rows").filter(has=page.locator("legend", has_text="Travellers"))
    expect(travellers.locator("fieldset.sf-item")).to_have_count(1)
    travellers.get_by_label("Full name", exact=True).fill("Ada")
    travellers.get_by_role("button", name="Add to Travellers").click()
    expect(travellers.locator("fieldset.sf-item legend")).to_have_text(["Item 1", "Item 2"])
    travellers.locator("fieldset.sf-item").nth(1).get_by_label("Full name", exact=True).fill("Bob")
    travellers.locator("fieldset.sf-item").nth(1).get_by_label("Age", exact=True).fill("9")
    tags = form.locator("fieldset.sf-rows").filter(has=page.locator("legend", has_text="Tags"))
    tags.get_by_role("button", name="Add to Tags").click()
    tags.get_by_label("Tags, item 1", exact=True).fill("sea")
    tags.get_by_role("button", name="Add to Tags").click()
    tags.get_by_label("Tags, item 2", exact=True).fill("hills")
    tags.get_by_role("button", name="Remove item 1 of Tags").click()
    expect(tags.get_by_label("Tags, item 1", exact=True)).to_have_value("hills")
    form.get_by_label("dinner", exact=True).check()
    form.get_by_label("Trip name", exact=True).fill("Alps")
    form.get_by_label("Start", exact=True).fill("2026-07-01")
    form.get_by_label("Pace", exact=True).select_option(label="Slow and easy")
    form.get_by_label("Extra (JSON)", exact=True).fill("42")

    assert value(page) == {
        "tripName": "Alps",
        "max_nights": 7,
        "start": "2026-07-01",
        "pace": "slow",
        "insured": True,
        "meals": ["dinner"],
        "tags": ["hills"],
        "travellers": [{"name": "Ada"}, {"name": "Bob", "age": 9}],
        "extra": 42,
    }
    assert page.evaluate("window.drawn.validate()") == []

    # An optional object is left out until something in it is set (its defaults alone do
    # not count), and its required field with it; once begun, it is checked.
    budget = form.locator("fieldset.sf-object").filter(has=page.locator("legend", has_text="Budget"))
    expect(budget.get_by_label("Currency", exact=True)).to_have_value("0")  # its default, EUR
    assert hint_of(page, budget) == "Leave empty for no limit"
    amount = budget.get_by_label("Amount", exact=True)
    amount.fill("0")
    amount.blur()
    expect(error_beside(page, amount)).to_have_text("must be more than 0")
    amount.fill("120")
    expect(error_beside(page, amount)).to_be_hidden()
    assert value(page)["budget"] == {"amount": 120, "currency": "EUR"}

    # A JSON field that does not parse says so, beside it.
    extra = form.get_by_label("Extra (JSON)", exact=True)
    extra.fill("{oops")
    extra.blur()
    expect(error_beside(page, extra)).to_contain_text("not valid JSON")
    extra.fill('"walk"')
    expect(error_beside(page, extra)).to_be_hidden()

    # setValue shows a value, and says what it could not show.
    problems = page.evaluate(
        """() => window.drawn.setValue({tripName: "Coast", start: "2026-08-02", travellers: [{name: "Cy"}],
                                        contact: null, colour: "red"})"""
    )
    assert problems == [{"path": "colour", "message": "the form has no field for this key"}]
    # (A checkbox cannot say "absent": it shows the default, which the server would take.)
    assert value(page) == {"tripName": "Coast", "start": "2026-08-02", "insured": True, "travellers": [{"name": "Cy"}]}


def test_the_renderer_checks_what_the_schema_says_and_shows_text_as_text(login: Callable[..., Page]) -> None:
    page = login()
    page.goto("/catalog/mailbox__search/")
    hostile = '<img src=x onerror="window.__pwned=1">'
    form = draw(
        page,
        {
            "type": "object",
            "required": ["code", "email"],
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 3, "title": hostile},
                "email": {"type": "string", "format": "email", "description": hostile},
                "site": {"type": "string", "format": "uri"},
                "count": {"type": "integer", "minimum": 2},
                "colour": {"enum": ["red", hostile], "enumNames": ["Red", hostile]},
                "picks": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2},
            },
        },
    )
    code = form.get_by_label(hostile, exact=True)
    email = form.get_by_label("Email", exact=True)
    assert hint_of(page, email) == hostile
    expect(form.locator("img")).to_have_count(0)
    code.fill("abcd")
    email.fill("not-an-address")
    form.get_by_label("Site", exact=True).fill("example.com")
    form.get_by_label("Count", exact=True).fill("1.5")
    form.get_by_label("a", exact=True).check()
    errors = page.evaluate("window.drawn.validate().map(e => [e.path, e.message])")
    assert errors == [
        ["code", "must be at most 3 characters (it has 4)"],
        ["code", "must match the pattern ^[A-Z]{3}$"],
        ["email", "must be an email address"],
        ["site", "must be a full address, like https://example.com/"],
        ["count", "must be a whole number"],
        ["picks", "choose at least 2"],
    ]
    # Each beside its own field, once the field was left (or, for the checkboxes, used).
    expect(error_beside(page, code)).to_have_text(
        "must be at most 3 characters (it has 4); must match the pattern ^[A-Z]{3}$"
    )
    expect(error_beside(page, email)).to_have_text("must be an email address")
    expect(form.locator("fieldset.sf-multi .sf-error")).to_have_text("choose at least 2")
    expect(form.locator(".sf-error:visible")).to_have_count(5)
    code.fill("ABC")
    expect(error_beside(page, code)).to_be_hidden()
    expect(form.get_by_label("Colour", exact=True).locator("option")).to_have_text(["\u2014", "Red", hostile])
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_the_form_fits_a_phone_screen(login: Callable[..., Page]) -> None:
    page = login()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/catalog/mailbox__send/")
    expect(page.locator("#call-fields").get_by_label("Body", exact=True)).to_be_visible()
    draw(page, RICH_SCHEMA).locator("fieldset.sf-rows button").first.click()
    for box in ("#drawn", "#call-form"):
        for element in page.locator(f"{box}, {box} input, {box} select, {box} textarea, {box} fieldset").all():
            rect = element.bounding_box()
            if rect is None:  # hidden
                continue
            assert rect["x"] >= 0 and rect["x"] + rect["width"] <= 390 + 0.5, (
                box,
                element.evaluate("e => e.outerHTML.slice(0, 120)"),
                rect,
            )
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
