"""What stage 1 does with any workload's records: parse a JSONL line, reject with a reason, deduplicate.

A workload's ``RecordRules`` (``aigc.workload``) decides what a clean record is; the core parses
lines, quarantines every rejection with its reason, and drops duplicates in drop order (the first
record wins). ``PerRecordRules`` is the short way to write rules: one method that turns a parsed
record into a curated row, and the core does the rest, including near-duplicate detection by MinHash
over the tokens the workload names (the configured similarity applied to every candidate pair).
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aigc.config import PrepareConfig
from aigc.jsonlines import JsonLimits, Refused, read_json_object
from aigc.prepare import minhash
from aigc.workload import RecordRules

CORE_REASONS = ("invalid_utf8", "malformed_json", "record_too_large", "missing_field", "attachment_key_invalid",
                "duplicate_id", "exact_duplicate", "near_duplicate")
"""Quarantine reasons the core gives whatever the workload; a workload's own come from its checks."""
_REASON = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Rejected:
    reason: str
    """A machine-readable slug (``caption_too_long``): the quarantine's and gate 1's key."""
    detail: str
    """For a human: the value and the limit it broke, and how to change the limit."""
    record: dict | None = None
    """The parsed record when the line was one (its id goes to quarantine), None when it was not."""

    def __post_init__(self) -> None:
        if not _REASON.match(self.reason):
            raise ValueError(f"a rejection reason is a lowercase slug like 'text_too_long', got {self.reason!r}")


@dataclass(frozen=True)
class Unreadable:
    """An attachment key the drop's lake refused to read (a symbolic link, a path out of the drop): its record is
    quarantined with the lake's message, and no byte behind the key is read."""

    detail: str


@dataclass
class Examined:
    """A batch of lines after the per-record checks, before dedup."""

    outcomes: list[tuple[dict | None, bytes | None, dict | Rejected]]
    """Per line: (the parsed record, the attachment bytes worth quarantining, the verdict). A verdict that is
    not a rejection holds only the dedup keys (``RecordRules.dedup_keys``) of its row."""
    columns: dict[str, list]
    """The curated candidates, by column of the curated schema: one row per non-rejected verdict, in order.
    Plain lists, not Arrow arrays: building those here would import pandas into every decoding process."""


def parse_record(data: bytes, fields: tuple[str, ...], limits: JsonLimits | None = None) -> dict | Rejected:
    """Bytes of one JSONL line → the record (a JSON object, within ``limits``, whose ``fields`` are strings), or
    why not."""
    try:
        record = read_json_object(data, limits or JsonLimits())
    except Refused as e:
        return Rejected(e.reason, e.detail)
    missing = [f for f in fields if not isinstance(record.get(f), str)]
    if missing:
        return Rejected("missing_field", f"field(s) {missing} missing or not strings", record)
    for name in fields:
        try:
            record[name].encode("utf-8")
        except UnicodeEncodeError as e:  # JSON's "\ud800" escapes decode to unencodable lone surrogates
            return Rejected("invalid_utf8", f"field {name!r} holds a lone surrogate at index {e.start}", record)
    return record


class ExactDedup:
    """Unique ids and unique content (the row's ``content_hash``), within the drop and against the rows that earlier
    dates published (``add(row, origin=date)``)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._content: dict[bytes, str] = {}
        self._origin: dict[str, str] = {}  # id → the date that published it, for rows of earlier dates

    def see(self, rec_id: str) -> None:
        """An id that reached dedup, kept or not: a later record reusing it is a ``duplicate_id`` either way (ids
        name records; one that named a removed duplicate names it still)."""
        self._ids.add(rec_id)

    def check_id(self, rec_id: str) -> Rejected | None:
        if rec_id in self._ids:
            where = f"was published for dt={self._origin[rec_id]}" if rec_id in self._origin else \
                "appeared earlier in the drop"
            return Rejected("duplicate_id", f"id {rec_id!r} {where}")
        return None

    def check(self, row: dict, what: str = "content") -> Rejected | None:
        first = self._content.get(_content_key(row))
        if first is not None:
            return Rejected("exact_duplicate", f"same {what} as {first!r}{self.published(first)}")
        return None

    def add(self, row: dict, origin: str | None = None) -> None:
        self._ids.add(row["id"])
        self._content[_content_key(row)] = row["id"]
        if origin:
            self._origin[row["id"]] = origin

    def published(self, rec_id: str) -> str:
        """' (published for dt=…)' when ``rec_id`` came from an earlier date, else ''."""
        return f" (published for dt={self._origin[rec_id]})" if rec_id in self._origin else ""


def _content_key(row: dict) -> bytes:
    return bytes.fromhex(row["content_hash"][:32])  # 16 bytes of SHA-256: collisions are not a concern


class SignatureDedup:
    """Ids, exact content, then near-duplicates: LSH over MinHash signatures proposes candidates, and a candidate
    is a near-duplicate only when its signatures agree on at least ``threshold`` of their positions (an unbiased
    estimate of the tokens' Jaccard similarity), so the configured similarity is what decides."""

    def __init__(self, threshold: float, num_perm: int, what: str = "content", per_bucket: int = 32) -> None:
        self.exact, self.threshold, self.num_perm, self.what = ExactDedup(), threshold, num_perm, what
        self._lsh = minhash.BandIndex(threshold, num_perm, per_bucket)
        self._sigs = np.empty((1024, num_perm), dtype=np.uint32)
        self._ids: list[str] = []
        self.candidates = 0

    def check_batch(self, rows: list[dict]) -> list[Rejected | None]:
        verdicts: list[Rejected | None] = []
        for row in rows:
            verdict = self.exact.check_id(row["id"]) or self.exact.check(row, self.what) or self._near(row)
            if verdict is None:
                self.exact.add(row)
                self._add(row)
            elif verdict.reason != "duplicate_id":
                self.exact.see(row["id"])
            verdicts.append(verdict)
        return verdicts

    def stats(self) -> dict:
        """What dedup cost: near-duplicate candidates compared (against kept rows) and the index's bytes."""
        return {"near_candidates": self.candidates, "index_bytes": self._lsh.nbytes + self._sigs.nbytes}

    def seed(self, rows: list[dict], origin: str) -> None:
        """Rows an earlier date kept and published (their dedup keys): later rows that repeat them are duplicates."""
        for row in rows:
            self.exact.add(row, origin)
            self._add(row)

    def _near(self, row: dict) -> Rejected | None:
        if row.get("_sig") is None:
            return None
        sig = np.frombuffer(row["_sig"], dtype=np.uint32)
        candidates = np.sort(self._lsh.query(_bands(row))[1])  # earliest first: argmax names the earliest of ties
        self.candidates += len(candidates)
        if not len(candidates):
            return None
        agreement = (self._sigs[candidates] == sig).mean(axis=1)
        best = int(np.argmax(agreement))
        if agreement[best] < self.threshold:
            return None
        first = self._ids[candidates[best]]
        return Rejected("near_duplicate", f"near-duplicate of {first!r}{self.exact.published(first)} (estimated "
                                          f"Jaccard similarity {agreement[best]:.2f} ≥ near_dup_threshold="
                                          f"{self.threshold})")

    def _add(self, row: dict) -> None:
        if row.get("_sig") is None:
            return
        n = len(self._ids)
        if n == len(self._sigs):
            self._sigs = np.concatenate([self._sigs, np.empty_like(self._sigs)])
        self._sigs[n] = np.frombuffer(row["_sig"], dtype=np.uint32)
        self._ids.append(row["id"])
        self._lsh.insert(_bands(row), np.array([n]))


def _bands(row: dict) -> np.ndarray:
    return np.frombuffer(row["_bands"], dtype=np.uint64)[None]


class PerRecordRules(RecordRules):
    """Rules written one record at a time: implement ``examine`` (and ``near_tokens`` for near-duplicates).

    The core parses each line (``record_fields`` must be strings), fetches the record's attachment when
    ``attachment_field`` names one, calls ``examine``, hashes ``content`` for exact duplicates, and signs
    ``near_tokens`` for near ones."""

    dedup_keys = ("id", "content_hash", "_sig", "_bands")

    @abstractmethod
    def examine(self, record: dict, attachment: bytes | None, cfg: PrepareConfig) -> dict | Rejected:
        """A parsed record (and its attachment's bytes) → a curated row (every column of ``curated_schema`` but
        ``content_hash``), or a ``Rejected`` naming the value and the limit."""

    def content(self, row: dict) -> bytes:
        """The bytes two rows share exactly when they are the same content (hashed for exact dedup)."""
        return json.dumps([row[c] for c in self.curated_schema.names if c not in ("id", "content_hash", "source",
                                                                                     "created_at")],
                          sort_keys=True, default=str).encode()

    def near_tokens(self, row: dict) -> set[str] | None:
        """Tokens whose Jaccard similarity makes two rows near duplicates (word shingles); None: no near dedup."""
        return None

    def examine_lines(self, lines, fetch_all: Callable[[list[str]], list], cfg) -> Examined:
        parsed = [parse_record(line.data, self.record_fields, cfg.json_limits) for line in lines]
        keys = [p[self.attachment_field] for p in parsed if self.attachment_field and isinstance(p, dict)]
        attachments = iter(fetch_all(keys) if keys else [])
        outcomes, rows = [], []
        for p in parsed:
            if isinstance(p, Rejected):
                outcomes.append((p.record, None, p))
                continue
            attachment = next(attachments) if self.attachment_field else None
            if isinstance(attachment, Unreadable):
                outcomes.append((p, None, Rejected("attachment_key_invalid", attachment.detail, p)))
                continue
            row = self.examine(p, attachment, cfg)
            if isinstance(row, Rejected):
                outcomes.append((p, attachment, Rejected(row.reason, row.detail, p)))
                continue
            row["content_hash"] = hashlib.sha256(self.content(row)).hexdigest()
            tokens = self.near_tokens(row)
            keys_of = {"id": row["id"], "content_hash": row["content_hash"], "_sig": None, "_bands": None}
            if tokens:
                sig = minhash.signature(tokens, cfg.near_dup_num_perm)
                keys_of["_sig"] = sig.tobytes()
                keys_of["_bands"] = minhash.band_keys(sig, cfg.near_dup_threshold, cfg.near_dup_num_perm).tobytes()
            rows.append(row)
            outcomes.append((p, None, keys_of))
        return Examined(outcomes, {name: [row[name] for row in rows] for name in self.curated_schema.names})

    def deduplicator(self, cfg):
        return SignatureDedup(cfg.near_dup_threshold, cfg.near_dup_num_perm, per_bucket=cfg.near_dup_per_bucket)
