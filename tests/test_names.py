"""Names made safe: ``file_name`` never leaves its folder and keeps distinct names distinct; ``shown`` never writes a
raw control character and reads back as the name; ``encoded`` takes any string JSON holds. Checked on generated
strings (any code point, lone surrogates included) against plain rules written out here."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_kit.names import HASH_LENGTH, READABLE_LENGTH, SHOWN_LENGTH, encoded, file_name, shown

# any code point, surrogates included (``st.text`` leaves them out), with the troublesome ones made likely
CODE_POINTS = st.one_of(st.integers(0, 0x10FFFF).map(chr), st.sampled_from(list("./\\:~ \n\x00\x1bAa-_\u202e\udc80")))
NAMES = st.one_of(st.lists(CODE_POINTS, max_size=90).map("".join),
                  st.sampled_from(["", ".", "..", "../../x", "/etc/passwd", "C:\\x", "con", "CON.txt", "nul.png",
                                   "lpt1", "a" * 65, "a.", "00576224", "ABC", "abc"]))
WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{digit}" for digit in range(10)),
                   *(f"lpt{digit}" for digit in range(10))}


def is_safe(name: str) -> bool:
    """A file name that stays in its folder on Linux, macOS and Windows alike, the slow way."""
    return (name not in ("", ".", "..") and not name.startswith(".")
            and all(character.isascii() and (character.isalnum() or character in "._-~") for character in name)
            and name.split(".")[0].lower() not in WINDOWS_DEVICES and not name.endswith(".")
            and len(name) <= READABLE_LENGTH + 1 + HASH_LENGTH)


@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_a_file_name_is_safe_everywhere_and_a_plain_id_is_kept(name):
    made = file_name(name)
    assert is_safe(made), (name, made)
    assert file_name(name, ".png") == made + ".png"
    if re.fullmatch(r"[0-9a-f]{8}", name):
        assert made == name  # every ARC task id names its file as it is


@pytest.mark.slow  # 400 examples: seconds
@settings(max_examples=400, deadline=None)
@given(NAMES, NAMES)
def test_distinct_names_give_distinct_file_names_also_where_case_is_ignored(first, second):
    if first != second:
        assert file_name(first).lower() != file_name(second).lower()


def test_a_changed_name_never_takes_the_file_name_of_another():
    hashed = file_name("ABC")
    assert hashed.startswith("ABC~") and file_name("abc") == "abc"
    assert file_name(hashed) != hashed and file_name(hashed.lower()) != hashed  # '~' is always changed
    assert len({file_name(name).lower() for name in ["A", "a", "_", "", ".", "..", "/", "\\"]}) == 8


@pytest.mark.slow  # 400 examples: seconds
@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_a_shown_name_has_no_raw_control_character_and_reads_back(name):
    text = shown(name)
    assert text.isprintable() and "\n" not in text and "\x1b" not in text
    if len(name) <= SHOWN_LENGTH:
        assert text == name or ast.literal_eval(text) == name  # plain as it is, else a Python string literal
    else:
        assert text.endswith(f"... ({len(name)} characters)")


def test_plain_ids_are_shown_as_they_are_and_odd_ones_quoted():
    assert shown("007bbfb7") == "007bbfb7" and shown("a/b") == "a/b"
    assert shown("") == "''" and shown("a b") == "'a b'" and shown("x\n[ok]") == "'x\\n[ok]'"
    assert shown("'quoted'") != "'quoted'"  # never taken for the quoted form of another id


@given(NAMES)
def test_any_name_encodes_and_an_encodable_one_as_utf8(name):
    data = encoded(name)
    assert data.decode("utf-8", "surrogatepass") == name
    try:
        assert data == name.encode("utf-8")
    except UnicodeEncodeError:
        pass  # a lone surrogate: only ``encoded`` takes it


def test_listed_shows_what_fits_and_counts_the_rest():
    from arc_kit.names import listed

    assert listed([]) == "" and listed(["a", "b", "c"]) == "a, b, c"
    assert listed(["a", "b", "c", "d"], count=2) == "a, b and 2 more"
    assert listed("abcdef", separator="; ", count=5) == "a; b; c; d; e and 1 more"
    long = [f"item-{number:03d}-" + "x" * 30 for number in range(100)]
    text = listed(long)
    assert len(text) <= 200 and text.startswith(long[0]) and text.endswith(f" and {100 - text.count(', ') - 1} more")
    assert listed(["y" * 500]) == "y" * 200 + "..."  # one item alone longer than the room: cut
    for length in (10, 50, 120):  # never past its room but for the first item
        assert len(listed(long, length)) <= max(length, len(long[0]) + len(" and 99 more"))
