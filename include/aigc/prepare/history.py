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

import numpy as np
import pyarrow as pa

from aigc.lake import Lake
from aigc.lake.keys import join, partition
from aigc.lake.publish import NotPublished, resolve
from aigc.prepare import minhash

log = logging.getLogger(__name__)
KEYS_DIR = "_dedup_keys"
_TEXT_KEYS = ("id", "content_hash")


def _rebanded(row: dict, settings: dict) -> dict:
    if row.get("_sig") is None:
        return row
    sig = np.frombuffer(row["_sig"], dtype=np.uint32)
    return {**row, "_bands": minhash.band_keys(sig, settings["threshold"], settings["num_perm"]).tobytes()}


def keys_schema(dedup_keys: tuple[str, ...]) -> pa.Schema:
    """ids and content hashes as strings; the rest (signatures, band keys, thumbnails) as bytes."""
    return pa.schema([(k, pa.string() if k in _TEXT_KEYS else pa.binary()) for k in dedup_keys])


def dedup_settings(cfg) -> dict:
    """What the stored keys depend on: signatures on the permutations, band keys on the threshold too."""
    return {"num_perm": cfg.near_dup_num_perm, "threshold": cfg.near_dup_threshold}


def seed_from_earlier_dates(dedup, lake: Lake, dataset: str, date: dt.date, days: int, manifest: str,
                            dedup_keys: tuple[str, ...], settings: dict) -> list[dict]:
    """Load the kept rows of the published partitions of the ``days`` dates before ``date`` into ``dedup``
    (oldest first); what was loaded, per date. A deduplicator without ``seed`` dedups within the drop only.

    Keys written under other settings: with another threshold the band keys are recomputed from the stored
    signatures; with another number of permutations the signatures cannot be compared, so that date's rows are
    checked for exact duplicates only (ids and content hashes), and the summary says so."""
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
        stored = lake.get_json(join(pointer["run_prefix"], manifest))
        shards = stored.get("dedup_keys", [])
        if not shards:  # published before partitions kept their keys
            continue
        written = stored.get("dedup_settings", {})
        signatures_usable = written.get("num_perm") == settings["num_perm"]
        rebands = signatures_usable and written.get("threshold") != settings["threshold"]
        if not signatures_usable:
            log.warning("dt=%s kept its dedup keys with %s MinHash permutations, this run uses %d: its rows are "
                        "checked for exact duplicates only", day, written.get("num_perm"), settings["num_perm"])
        table = lake.read_parquet(shards, columns=list(dedup_keys))
        for batch in table.to_batches(max_chunksize=65536):
            rows = batch.to_pylist()
            if not signatures_usable:
                rows = [{**row, "_sig": None, "_bands": None} for row in rows]
            elif rebands:
                rows = [_rebanded(row, settings) for row in rows]
            dedup.seed(rows, day.isoformat())
        loaded.append({"date": day.isoformat(), "run_id": pointer["run_id"], "rows": table.num_rows,
                       "near_duplicates_checked": signatures_usable})
    if loaded:
        log.info("deduplicating against %d row(s) published for %s", sum(d["rows"] for d in loaded),
                 ", ".join(d["date"] for d in loaded))
    return loaded
