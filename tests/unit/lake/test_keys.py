import datetime as dt
import random

import pytest

from aigc.lake import keys
from aigc.lake.keys import LakeKeyError, join, parse_date, partition, run_prefix, validate_key


@pytest.mark.parametrize("key", ["a", "raw/shapes/dt=2026-11-28/images/x.png", "a b/ü.json", "x/_SUCCESS"])
def test_valid_keys_pass_unchanged(key):
    assert validate_key(key) == key


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", "empty"),
        ("../etc/passwd", "traverse"),
        ("a/../../b", "traverse"),
        ("a/./b", "traverse"),
        ("/etc/passwd", "absolute"),
        ("C:/x", "absolute"),
        ("a//b", "empty segment"),
        ("a\\..\\b", "backslash"),
        ("a/b\x00c", "control character"),
        ("a/\nb", "control character"),
        ("k" * 1100, "longer than"),
    ],
)
def test_unsafe_keys_are_refused_with_a_reason(key, words):
    with pytest.raises(LakeKeyError, match=words):
        validate_key(key)


def test_layout_helpers_build_the_documented_partitions():
    p = partition("curated", "shapes", "2026-11-28")
    assert p == "curated/shapes/dt=2026-11-28"
    assert run_prefix(p, "20261129T010203Z-abc") == "curated/shapes/dt=2026-11-28/run=20261129T010203Z-abc"
    assert join("a/", "/b", "c") == "a/b/c"
    assert parse_date(dt.datetime(2026, 1, 2, 3, 4)) == dt.date(2026, 1, 2)


@pytest.mark.parametrize("bad", ["2026-13-01", "yesterday", "28/11/2026"])
def test_bad_dates_name_the_expected_format(bad):
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_date(bad)


@pytest.mark.parametrize("name", ["Shapes", "../x", "a/b", ""])
def test_dataset_names_must_be_slugs(name):
    with pytest.raises(LakeKeyError, match="slug"):
        partition("curated", name, "2026-11-28")


def test_the_fast_path_accepts_only_keys_every_rule_accepts():
    """validate_key's one-regex shortcut must never let through a key the full checks refuse."""
    rng = random.Random(7)
    alphabet = ["a", "Z", "0", "_", "-", "=", ".", "..", "/", "//", "\\", " ", ":", "ü", "\n", "\x00", "+"]
    shortcut = fully_accepted = 0
    for _ in range(20_000):
        key = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        try:
            keys._check_key(key, allow_empty=False)
            full = True
        except LakeKeyError:
            full = False
        fast = len(key) <= keys._PLAIN_KEY_CHARS and keys._PLAIN_KEY.fullmatch(key) is not None
        assert not fast or full, key
        shortcut += fast
        fully_accepted += full
    assert shortcut > 1000 and fully_accepted > shortcut  # both paths were exercised
