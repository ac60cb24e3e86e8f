"""Exposed tool names: `<server>__<tool>`, valid for every model API, unique and stable."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostapp.catalog.naming import EXPOSED_RE, MAX_LEN, _digest, expose_names, split_exposed
from hostapp.mcp.config import NAME_RE

SETTINGS = settings(max_examples=200, deadline=None)

servers = st.from_regex(NAME_RE, fullmatch=True)
# Anything a server might send: unicode, punctuation, spaces, very long names.
any_names = st.sets(st.text(min_size=1, max_size=120), min_size=1, max_size=25)
# Names that need no change under any server prefix (<= 64 - len("<32 chars>__")).
CLEAN_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
clean_names = st.sets(st.text(CLEAN_ALPHABET, min_size=1, max_size=30), max_size=15)


@SETTINGS
@given(server=servers, names=any_names)
def test_it_gives_every_name_a_unique_valid_prefixed_exposed_name(server: str, names: set[str]) -> None:
    exposed = expose_names(server, names)
    assert set(exposed) == names
    results = [e.name for e in exposed.values()]
    assert len(set(results)) == len(results)
    for name in results:
        assert EXPOSED_RE.match(name), name
        assert len(name) <= MAX_LEN
        assert name.startswith(server + "__")
        assert split_exposed(name)[0] == server


@SETTINGS
@given(server=servers, names=any_names, seed=st.integers())
def test_it_is_deterministic_and_independent_of_input_order(server: str, names: set[str], seed: int) -> None:
    ordered = sorted(names)
    shuffled = list(names)
    random.Random(seed).shuffle(shuffled)
    assert expose_names(server, ordered) == expose_names(server, shuffled)
    assert expose_names(server, ordered) == expose_names(server, ordered + ordered)


@SETTINGS
@given(server=servers, clean=clean_names, others=st.sets(st.text(min_size=1, max_size=80), max_size=15))
def test_it_keeps_names_that_need_no_change_whatever_else_is_listed(
    server: str, clean: set[str], others: set[str]
) -> None:
    alone = expose_names(server, clean)
    together = expose_names(server, clean | others)
    for name in clean:
        assert alone[name].name == f"{server}__{name}"
        assert together[name].name == f"{server}__{name}"
        assert together[name].warning == ""


@SETTINGS
@given(server=servers, names=any_names)
def test_it_warns_about_every_name_it_had_to_change(server: str, names: set[str]) -> None:
    for original, exposed in expose_names(server, names).items():
        if exposed.name != f"{server}__{original}":
            assert exposed.warning, original
        else:
            assert exposed.warning == ""


@SETTINGS
@given(server=servers, names=any_names, extra=st.text(min_size=1, max_size=40))
def test_it_exposes_a_name_the_same_way_after_an_unrelated_name_comes_and_goes(
    server: str, names: set[str], extra: str
) -> None:
    """A refresh that finds the same tools exposes them under the same names."""
    before = expose_names(server, names)
    during = expose_names(server, names | {extra})
    after = expose_names(server, names)
    assert before == after
    sanitized_extra = "".join(c if c in CLEAN_ALPHABET else "_" for c in extra)
    for original in names:
        sanitized = "".join(c if c in CLEAN_ALPHABET else "_" for c in original)
        if sanitized != sanitized_extra and len(server) + 2 + len(original) <= MAX_LEN:
            assert during[original] == before[original], original


@pytest.mark.parametrize(
    ("original", "exposed"),
    [
        ("read_file", "fs__read_file"),
        ("read-file", "fs__read-file"),
        ("files.read", "fs__files_read"),
        ("read file", "fs__read_file"),
        ("ファイル", "fs__" + "_" * 4),
        ("naïve/path:tool", "fs__na_ve_path_tool"),
        ("emoji🙂", "fs__emoji_"),
    ],
)
def test_it_sanitizes_each_character_outside_the_allowed_alphabet(original: str, exposed: str) -> None:
    result = expose_names("fs", [original])[original]
    assert result.name == exposed
    assert EXPOSED_RE.match(result.name)


def test_it_names_the_change_in_the_warning() -> None:
    result = expose_names("fs", ["files.read"])["files.read"]
    assert result.warning == "the name 'files.read' was changed to fit [A-Za-z0-9_-]"


def test_it_truncates_a_200_character_name_with_a_short_stable_hash() -> None:
    long_name = "x" * 200
    result = expose_names("fs", [long_name])[long_name]
    assert len(result.name) == MAX_LEN
    assert result.name == "fs__" + "x" * (MAX_LEN - len("fs__") - 9) + "_" + _digest(long_name, 8)
    assert result.warning == "the name was shortened to 64 characters"
    assert expose_names("fs", [long_name, "other"])[long_name] == result


def test_it_tells_apart_two_long_names_that_share_their_first_64_characters() -> None:
    a, b = "y" * 100 + "a", "y" * 100 + "b"
    result = expose_names("fs", [a, b])
    assert result[a].name != result[b].name
    assert result[a].name[:-9] == result[b].name[:-9]


def test_it_lets_the_name_that_needed_no_change_win_a_collision() -> None:
    result = expose_names("fs", ["a.b", "a_b"])
    assert result["a_b"].name == "fs__a_b"
    assert result["a_b"].warning == ""
    assert result["a.b"].name == "fs__a_b_" + _digest("a.b", 8)
    assert result["a.b"].warning == "the name 'a.b' collides with 'a_b' after sanitizing; a suffix tells them apart"


def test_it_suffixes_every_member_of_a_collision_when_none_is_clean() -> None:
    result = expose_names("fs", ["a.b", "a b", "a/b"])
    assert {r.name for r in result.values()} == {"fs__a_b_" + _digest(n, 8) for n in ("a.b", "a b", "a/b")}
    assert "collides with 'a b', 'a/b'" in result["a.b"].warning


def test_it_resolves_a_collision_the_same_way_on_every_refresh() -> None:
    first = expose_names("fs", ["a.b", "a_b", "c"])
    again = expose_names("fs", ["c", "a_b", "a.b"])
    assert first == again


def test_it_prefixes_with_the_server_so_two_servers_never_share_a_name() -> None:
    assert expose_names("git", ["status"])["status"].name == "git__status"
    assert expose_names("git-hub", ["status"])["status"].name == "git-hub__status"


def test_it_splits_an_exposed_name_at_the_first_separator() -> None:
    assert split_exposed("git-hub__list__all") == ("git-hub", "list__all")
    with pytest.raises(ValueError, match="not a namespaced tool name"):
        split_exposed("status")


def test_it_never_renames_a_clean_name_to_make_room_for_a_suffixed_one() -> None:
    clean = "x_y_" + _digest("x.y", 8)
    assert expose_names("srv", [clean])[clean].name == f"srv__{clean}"
    result = expose_names("srv", ["x.y", "x_y", clean])
    assert result[clean].name == f"srv__{clean}"
    assert result[clean].warning == ""
