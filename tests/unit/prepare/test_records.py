"""The core's part of stage 1 for any workload: parsing a line, the rejection type, and MinHash dedup that applies
the configured similarity."""

from __future__ import annotations

import hashlib

import pytest

from aigc.prepare import minhash
from aigc.prepare.records import Rejected, SignatureDedup, parse_record

FIELDS = ("id", "text")


@pytest.mark.parametrize(("line", "reason", "detail"), [
    (b"\xff{}", "invalid_utf8", "byte b'\\xff' at offset 0"),
    (b"{nope", "malformed_json", "Expecting property name"),
    (b"[1, 2]", "malformed_json", "got list"),
    (b'{"id": "a", "text": 3}', "missing_field", "['text']"),
    (b'{"id": "a", "text": "\\ud800"}', "invalid_utf8", "lone surrogate at index 0"),
])
def test_a_line_that_is_not_a_record_says_why(line, reason, detail):
    got = parse_record(line, FIELDS)
    assert isinstance(got, Rejected) and got.reason == reason and detail in got.detail


def test_a_record_with_its_fields_parses():
    assert parse_record(b'{"id": "a", "text": "t", "extra": [1]}', FIELDS) == {"id": "a", "text": "t", "extra": [1]}


def test_a_reason_is_a_slug():
    with pytest.raises(ValueError, match="lowercase slug"):
        Rejected("Too Long", "x")


def row(rec_id: str, words: list[str], threshold: float = 0.7, num_perm: int = 128) -> dict:
    shingles = {" ".join(words[i:i + 3]) for i in range(len(words) - 2)}
    sig = minhash.signature(shingles, num_perm)
    return {"id": rec_id, "content_hash": hashlib.sha256(" ".join(words).encode()).hexdigest(),
            "_sig": sig.tobytes(), "_bands": minhash.band_keys(sig, threshold, num_perm).tobytes()}


def test_near_duplicates_are_judged_by_the_configured_similarity_not_by_a_shared_bucket():
    base = [f"w{i}" for i in range(200)]
    near = base[:195] + ["x1", "x2", "x3", "x4", "x5"]  # shingle Jaccard ≈ 0.93
    apart = base[:120] + [f"y{i}" for i in range(80)]  # ≈ 0.43: shares buckets at a low threshold, not a dup
    dedup = SignatureDedup(threshold=0.7, num_perm=128)
    verdicts = dedup.check_batch([row("a", base), row("b", near), row("c", apart), row("a", apart), row("d", base)])
    assert verdicts[0] is None and verdicts[2] is None
    assert verdicts[1].reason == "near_duplicate" and "'a'" in verdicts[1].detail and "≥ near_dup_threshold=0.7" \
        in verdicts[1].detail
    assert verdicts[3].reason == "duplicate_id" and verdicts[4].reason == "exact_duplicate"
    # At a lower threshold the same pair of documents 43 % alike is a near duplicate.
    loose = SignatureDedup(threshold=0.3, num_perm=128)
    assert loose.check_batch([row("a", base, 0.3), row("c", apart, 0.3)])[1].reason == "near_duplicate"


def test_a_row_without_tokens_is_only_checked_exactly():
    dedup = SignatureDedup(threshold=0.5, num_perm=64)
    plain = {"id": "a", "content_hash": "ab" * 32, "_sig": None, "_bands": None}
    assert dedup.check_batch([plain, {**plain, "id": "b"}])[1].reason == "exact_duplicate"
