"""Dedup across dates: each published partition keeps the dedup keys of the rows it kept, and the next dates'
drops are checked against them.

Training reads a window of days (``TrainConfig.window_days``), so a record that arrives again the next day would
otherwise be trained on twice. Each run writes its kept rows' keys (the workload's ``RecordRules.dedup_keys``:
ids, content hashes, MinHash signatures and band keys, thumbnails for images; no payload) under
``<run>/_dedup_keys/``, published with the run itself, and ``prepare`` loads those of the
``dedup_lookback_days`` dates before its own into the deduplicator first. A duplicate of a published row is
quarantined with the date that published it. Only earlier dates count, so a date's result does not depend on
what was prepared after it; a backfill run newest-first checks less than one run oldest-first.
"""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa

from aigc.lake import Lake
from aigc.lake.keys import join, partition
from aigc.lake.publish import NotPublished, resolve

log = logging.getLogger(__name__)
KEYS_DIR = "_dedup_keys"
_TEXT_KEYS = ("id", "content_hash")


def keys_schema(dedup_keys: tuple[str, ...]) -> pa.Schema:
    """ids and content hashes as strings; the rest (signatures, band keys, thumbnails) as bytes."""
    return pa.schema([(k, pa.string() if k in _TEXT_KEYS else pa.binary()) for k in dedup_keys])


def seed_from_earlier_dates(dedup, lake: Lake, dataset: str, date: dt.date, days: int, manifest: str,
                            dedup_keys: tuple[str, ...]) -> list[dict]:
    """Load the kept rows of the published partitions of the ``days`` dates before ``date`` into ``dedup``
    (oldest first); what was loaded, per date. A deduplicator without ``seed`` dedups within the drop only."""
    if days <= 0:
        return []
    if not hasattr(dedup, "seed"):
        log.info("this workload's deduplicator has no seed(): duplicates are looked for within the drop only")
        return []
    loaded = []
    for back in range(days, 0, -1):
        day = date - dt.timedelta(days=back)
        try:
            pointer = resolve(lake, partition("curated", dataset, day))
        except NotPublished:
            continue
        shards = lake.get_json(join(pointer["run_prefix"], manifest)).get("dedup_keys", [])
        if not shards:  # published before partitions kept their keys
            continue
        table = lake.read_parquet([s["key"] for s in shards], columns=list(dedup_keys))
        for batch in table.to_batches(max_chunksize=65536):
            dedup.seed(batch.to_pylist(), day.isoformat())
        loaded.append({"date": day.isoformat(), "run_id": pointer["run_id"], "rows": table.num_rows})
    if loaded:
        log.info("deduplicating against %d row(s) published for %s", sum(d["rows"] for d in loaded),
                 ", ".join(d["date"] for d in loaded))
    return loaded
