"""Deduplicate in drop order and write: what stage 1 does with examined records, on one host or after a fan-out.

Both ways of preparing a drop end here. ``prepare`` (one host) feeds the records its decoding processes
examined; the fan-out's merge (``aigc.prepare.fanout``) feeds the same records read back from the parts the
mapped tasks wrote. Either way the curator sees the drop's lines in drop order, and it runs dedup on fixed
blocks of ``DEDUP_BLOCK`` candidates, never on whatever batch a caller happened to pass: so the verdicts, the
shards and the quarantine are the same bytes however the drop was split.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections import Counter

from aigc.config import PrepareConfig
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.prepare.drop import EmptyDrop, drop_prefix
from aigc.prepare.history import KEYS_DIR, dedup_settings, keys_schema, seed_from_earlier_dates
from aigc.prepare.records import Rejected
from aigc.prepare.shards import QUARANTINE_SCHEMA, RollingParquetWriter
from aigc.workload import RecordRules

MANIFEST = "_manifest.json"
DEDUP_BLOCK = 256
"""Candidates deduplicated at once. Fixed, so a verdict never depends on how the lines were batched: the index's
per-bucket cap applies between blocks, a block's own pairs are compared uncapped."""


class ReconciliationError(RuntimeError):
    """Input records ≠ curated + quarantined: a record was lost or counted twice."""


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a line came from and what its quarantine row would say about it, were it rejected."""

    file: str
    line_no: int
    raw: bytes
    record_id: str | None
    attachment_key: str | None


def origin_of(line, record: dict | None, rules: RecordRules) -> Origin:
    """The quarantine fields of a line (``RawLine``) and its parsed record (None when it did not parse)."""
    key = record.get(rules.attachment_field) if record and rules.attachment_field else None
    return Origin(line.file, line.line_no, line.data, _text(record.get("id")) if record else None, _text(key))


def curated_run(dataset: str, date: str | dt.date, run_id: str) -> str:
    """A preparation run's staging folder: its shards, manifests and the snapshot of its drop."""
    return run_prefix(partition("curated", dataset, date), run_id)


def quarantine_row(origin: Origin, why: Rejected, attachment: bytes | None) -> dict:
    return {"id": origin.record_id, "reason": why.reason, "detail": why.detail, "raw_file": origin.file,
            "raw_line": origin.line_no, "raw": bytes(origin.raw),  # a LongLine's head, not the line
            "attachment_key": origin.attachment_key, "attachment": attachment}


class Curator:
    """The run's writers (curated shards, quarantine, kept rows' dedup keys) and its deduplicator, seeded with the
    rows of the dates before. Feed it lines in drop order (``reject``, ``candidate``), then ``finish``."""

    def __init__(self, lake: Lake, date: dt.date, run_id: str, cfg: PrepareConfig, rules: RecordRules) -> None:
        self.lake, self.date, self.run_id, self.cfg, self.rules = lake, date, run_id, cfg, rules
        self.curated_run = curated_run(cfg.dataset, date, run_id)
        self.quarantine_run = run_prefix(partition("quarantine", cfg.dataset, date), run_id)
        sizes = {"target_bytes": cfg.shard_target_bytes, "row_group_rows": cfg.row_group_rows,
                 "row_group_bytes": cfg.row_group_bytes}
        self._curated = RollingParquetWriter(lake, self.curated_run, rules.curated_schema, **sizes)
        self._quarantine = RollingParquetWriter(lake, self.quarantine_run, QUARANTINE_SCHEMA, **sizes)
        self._keys = RollingParquetWriter(lake, join(self.curated_run, KEYS_DIR), keys_schema(rules.dedup_keys),
                                          **sizes)
        self.dedup = rules.deduplicator(cfg)
        self.settings = dedup_settings(cfg)
        self.earlier = seed_from_earlier_dates(self.dedup, lake, cfg.dataset, date, cfg.dedup_lookback_days,
                                               MANIFEST, rules.dedup_keys, self.settings)
        self.reasons: Counter[str] = Counter()
        self.curated = 0
        self._stats = {c: [math.inf, -math.inf, 0] for c in rules.stats_columns}  # min, max, sum
        # Candidates waiting for a full block: their dedup keys, origins, and curated columns.
        self._keys_pending: list[dict] = []
        self._origins: list[Origin] = []
        self._columns: dict[str, list] = {name: [] for name in rules.curated_schema.names}

    def reject(self, origin: Origin, why: Rejected, attachment: bytes | None) -> None:
        self.reasons[why.reason] += 1
        self._quarantine.write(quarantine_row(origin, why, attachment))

    def candidates(self, keys: list[dict], origins: list[Origin], columns: dict[str, list]) -> None:
        """Rows that passed the record rules, in drop order: their dedup keys, origins and curated columns."""
        self._keys_pending += keys
        self._origins += origins
        for name, column in self._columns.items():
            column += columns[name]
        while len(self._keys_pending) >= DEDUP_BLOCK:
            self._deduplicate(DEDUP_BLOCK)

    def _deduplicate(self, n: int) -> None:
        keys, origins = self._keys_pending[:n], self._origins[:n]
        columns = {name: column[:n] for name, column in self._columns.items()}
        del self._keys_pending[:n], self._origins[:n]
        for column in self._columns.values():
            del column[:n]
        kept = []
        for i, duplicate in enumerate(self.dedup.check_batch(keys)):
            if duplicate:
                self.reject(origins[i], duplicate, None)
            else:
                kept.append(i)
        if not kept:
            return
        self._keys.write_columns({name: [keys[i][name] for i in kept] for name in self.rules.dedup_keys})
        if len(kept) < n:
            columns = {name: [column[i] for i in kept] for name, column in columns.items()}
        self._curated.write_columns(columns)
        self.curated += len(kept)
        for column, (lo, hi, total) in self._stats.items():
            values = columns[column]
            self._stats[column] = [min(lo, min(values)), max(hi, max(values)), total + sum(values)]

    def finish(self, n_input: int, raw_uri: str, seconds: float, workload: str, fanout: dict | None = None,
               drop: dict | None = None, redelivered: dict | None = None) -> dict:
        """Deduplicate what is pending, close the shards, reconcile, write the manifests; the run's summary."""
        if self._keys_pending:
            self._deduplicate(len(self._keys_pending))
        curated_shards, quarantine_shards = self._curated.close(), self._quarantine.close()
        key_shards = self._keys.close()
        date, cfg, lake = self.date, self.cfg, self.lake
        if n_input == 0:
            raise EmptyDrop(f"the raw drop at {raw_uri} is complete but holds no records (its JSONL files are "
                            "empty): nothing to prepare. A drop needs at least one record; "
                            f"`aigc make-raw --date {date} --n N` writes a synthetic one")
        n_quarantined = sum(self.reasons.values())
        if n_input != self.curated + n_quarantined:
            raise ReconciliationError(f"input {n_input} ≠ curated {self.curated} + quarantined {n_quarantined}: "
                                      "records were lost or doubled")
        n = self.curated
        manifest = {
            "dataset": cfg.dataset, "date": date.isoformat(), "run_id": self.run_id, "raw": raw_uri,
            "input_records": n_input, "rows": n, "quarantined": dict(sorted(self.reasons.items())),
            "bytes": sum(s["bytes"] for s in curated_shards), "shards": curated_shards,
            "quarantine": {"prefix": self.quarantine_run, "shards": quarantine_shards},
            "dedup_keys": key_shards, "dedup_settings": self.settings, "deduplicated_against": self.earlier,
            "workload": workload, "schema": self.rules.curated_schema.to_string(show_schema_metadata=False),
            "stats": {c: {"min": lo if n else None, "max": hi if n else None, "mean": total / n if n else None}
                      for c, (lo, hi, total) in self._stats.items()},
            "config": dataclasses.asdict(cfg), "seconds": round(seconds, 3), "fanout": fanout,
            "drop": drop, "redelivered": redelivered,
        }
        lake.put_json(join(self.curated_run, MANIFEST), manifest)
        lake.put_json(join(self.quarantine_run, MANIFEST),
                      {k: manifest[k] for k in ("date", "run_id", "quarantined")})
        return {
            "stage": "prepare", "date": date.isoformat(), "run_id": self.run_id, "input": n_input, "curated": n,
            "quarantined": n_quarantined, "reasons": dict(sorted(self.reasons.items())),
            "staging_uri": lake.url(self.curated_run), "quarantine_uri": lake.url(self.quarantine_run),
            "shards": len(curated_shards), "seconds": round(seconds, 3),
            "rows_per_s": round(n_input / seconds, 1) if seconds else None,
            "dedup": self.dedup.stats() if hasattr(self.dedup, "stats") else None,
            "deduplicated_against": self.earlier, **({"fanout": fanout} if fanout else {}),
            **({"redelivered": redelivered} if redelivered else {}),
        }


def raw_uri(raw: Lake, date: dt.date) -> str:
    return raw.url(drop_prefix(date))


def _text(value) -> str | None:
    """A record's id or key for the quarantine's string columns (a malformed record may hold anything there)."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)
