"""The text workload's stage 1: normalise, bound, check the charset, filter, and sign for near duplicates.

Normalisation is Unicode NFC, ``\\r\\n`` → ``\\n``, trailing spaces dropped from every line and blank
lines at either end: two copies of a document that differ only in how they were saved are one (an
exact duplicate). Near duplicates share word shingles (``TextSettings.shingle_words`` words): MinHash-LSH
proposes candidates and the configured similarity decides (``aigc.prepare.records``).
"""

from __future__ import annotations

import re
import unicodedata

import pyarrow as pa

from aigc.prepare.records import PerRecordRules, Rejected
from aigc.safety import blocked_term

SCHEMA = pa.schema([
    ("id", pa.string()), ("text", pa.large_string()), ("chars", pa.int32()), ("words", pa.int32()),
    ("bytes", pa.int32()), ("content_hash", pa.string()), ("source", pa.string()), ("created_at", pa.string()),
])
_WORD = re.compile(r"\w+")
_CLEAN_CATEGORIES = ("L", "N", "P", "Z", "S")  # letters, digits, punctuation, spaces, symbols


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def clean_fraction(text: str) -> float:
    """Characters that are letters, digits, punctuation, symbols or spaces (newlines and tabs count as spaces)."""
    if not text:
        return 1.0
    good = sum(1 for c in text if c in "\n\t" or unicodedata.category(c)[0] in _CLEAN_CATEGORIES)
    return good / len(text)


class TextRecords(PerRecordRules):
    """Raw records ``{"id", "text", "source", "created_at"}`` (JSONL); the text may be long."""

    record_fields = ("id", "text", "source", "created_at")
    reasons = ("text_too_short", "text_too_long", "text_charset", "blocked_term")
    curated_schema = SCHEMA
    payload_columns = ("text",)
    stats_columns = ("chars", "words")

    def __init__(self, text_cfg=None):
        from aigc.workloads.text.config import TextSettings

        self.text = text_cfg or TextSettings()

    def examine(self, record, attachment, cfg):
        t = self.text
        text = normalise(record["text"])
        if len(text) < t.min_chars:
            return Rejected("text_too_short", f"text has {len(text)} characters after normalisation, below "
                                              f"min_chars={t.min_chars}")
        if len(text) > t.max_chars:
            return Rejected("text_too_long", f"text has {len(text)} characters, above max_chars={t.max_chars} "
                                             "(quarantined, not cut: raise --max-chars on aigc prepare)")
        clean = clean_fraction(text)
        if clean < t.min_clean_fraction:
            return Rejected("text_charset", f"only {clean:.1%} of the text's characters are letters, digits, "
                                            f"punctuation or spaces; min_clean_fraction={t.min_clean_fraction}")
        term = blocked_term(text, cfg.blocklist)
        if term:
            return Rejected("blocked_term", f"text contains blocked term {term!r}")
        return {"id": record["id"], "text": text, "chars": len(text), "words": len(_WORD.findall(text)),
                "bytes": len(text.encode()), "source": record["source"], "created_at": record["created_at"]}

    def content(self, row):
        return row["text"].encode()

    def near_tokens(self, row):
        words = _WORD.findall(row["text"].lower())
        k = self.text.shingle_words
        return {" ".join(words[i:i + k]) for i in range(max(1, len(words) - k + 1))}

    def expectations(self, cfg):
        import great_expectations.expectations as gxe

        t = self.text
        return [gxe.ExpectColumnValuesToBeBetween(column="chars", min_value=t.min_chars, max_value=t.max_chars),
                gxe.ExpectColumnValuesToBeBetween(column="words", min_value=1)]
