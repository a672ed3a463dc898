"""``aigc prepare``: a raw drop → curated Parquet shards + quarantine, in a run's staging folder.

Streaming in bounded windows: the main process reads lines, worker processes apply the workload's
record rules (parse, fetch attachments such as images with threads for S3 latency, decode, check,
sign), and the main process deduplicates in drop order and writes. At most ``window`` records are
in flight, whatever the drop size. Nothing is published here: the gate audits the run folder, then
``publish_prepared`` points the partition at it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing import get_context

from aigc.config import PrepareConfig
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition, run_prefix
from aigc.lake.publish import new_run_id, publish
from aigc.prepare.drop import SUCCESS, EmptyDrop, RawLine, drop_prefix, iter_lines, record_files
from aigc.prepare.history import KEYS_DIR, dedup_settings, keys_schema, seed_from_earlier_dates
from aigc.prepare.records import Examined, Rejected
from aigc.prepare.shards import QUARANTINE_SCHEMA, RollingParquetWriter
from aigc.prepare.worker import examine_lines, init_worker
from aigc.procs import available_cpus, worker_processes_allowed
from aigc.progress import progress
from aigc.workloads import RecordRules, load_workload

log = logging.getLogger(__name__)
MANIFEST = "_manifest.json"
BATCH = 256  # lines per task sent to a decoding process: amortises the IPC


class ReconciliationError(RuntimeError):
    """Input records ≠ curated + quarantined: a record was lost or counted twice."""


def prepare(raw: Lake, lake: Lake, date: str | dt.date, cfg: PrepareConfig, run_id: str | None = None,
            rules: RecordRules | None = None, workload: str = "image") -> dict:
    """Prepare the drop of ``date`` from ``raw`` into ``lake`` by a workload's record ``rules`` (default: the image
    workload's); returns the JSON summary."""
    rules = rules or load_workload("image").records(None)
    date = parse_date(date)
    run_id = run_id or new_run_id()
    started = time.perf_counter()
    curated_run = run_prefix(partition("curated", cfg.dataset, date), run_id)
    quarantine_run = run_prefix(partition("quarantine", cfg.dataset, date), run_id)
    lines = iter_lines(raw, record_files(raw, date))  # DropNotFound before anything is written
    expected = _announced_records(raw, date)

    sizes = {"target_bytes": cfg.shard_target_bytes, "row_group_rows": cfg.row_group_rows,
             "row_group_bytes": cfg.row_group_bytes}
    curated = RollingParquetWriter(lake, curated_run, rules.curated_schema, **sizes)
    quarantine = RollingParquetWriter(lake, quarantine_run, QUARANTINE_SCHEMA, **sizes)
    kept_keys = RollingParquetWriter(lake, join(curated_run, KEYS_DIR), keys_schema(rules.dedup_keys), **sizes)
    dedup = rules.deduplicator(cfg)
    settings = dedup_settings(cfg)
    earlier = seed_from_earlier_dates(dedup, lake, cfg.dataset, date, cfg.dedup_lookback_days, MANIFEST,
                                      rules.dedup_keys, settings)
    reasons: Counter[str] = Counter()
    n_input = n_curated = 0
    stats = {c: [math.inf, -math.inf, 0] for c in rules.stats_columns}  # min, max, sum

    def reject(line: RawLine, why: Rejected, record: dict | None, attachment: bytes | None) -> None:
        reasons[why.reason] += 1
        key = record.get(rules.attachment_field) if record and rules.attachment_field else None
        quarantine.write({
            "id": _text(record.get("id")) if record else None, "reason": why.reason, "detail": why.detail,
            "raw_file": line.file, "raw_line": line.line_no, "raw": line.data,
            "image_key": _text(key), "image": attachment,
        })

    def keep_batch(lines_: list[RawLine], examined: Examined) -> None:
        """Deduplicate a batch's candidates in drop order, then write the kept rows at once."""
        nonlocal n_curated
        kept: list[int] = []  # rows of `examined.columns`
        candidate = 0
        # The first record wins: dedup runs in drop order.
        keys = [v for _, _, v in examined.outcomes if not isinstance(v, Rejected)]
        duplicates = iter(dedup.check_batch(keys))
        for line, (record, image, verdict) in zip(lines_, examined.outcomes, strict=True):
            if isinstance(verdict, Rejected):
                reject(line, verdict, record, image)
                continue
            duplicate = next(duplicates)
            if duplicate:
                reject(line, duplicate, record, None)
            else:
                kept.append(candidate)
            candidate += 1
        if kept:
            kept_keys.write_columns({name: [keys[i][name] for i in kept] for name in rules.dedup_keys})
        if not kept:
            return
        rows = examined.columns
        if len(kept) < candidate:
            rows = {name: [column[i] for i in kept] for name, column in rows.items()}
        curated.write_columns(rows)
        n_curated += len(kept)
        for column, (lo, hi, total) in stats.items():
            values = rows[column]
            stats[column] = [min(lo, min(values)), max(hi, max(values)), total + sum(values)]

    workers = cfg.workers or available_cpus()
    drop = raw.sub(drop_prefix(date))
    in_flight: deque[tuple[list[RawLine], Future]] = deque()
    max_in_flight = max(2 * workers, cfg.window // BATCH)

    def drain_one() -> None:
        lines_, future = in_flight.popleft()
        keep_batch(lines_, future.result())

    with _executor(workers, drop, cfg, rules) as pool:
        batch: list[RawLine] = []
        for line in progress(lines, desc=f"prepare {date}", total=expected, unit="rec"):
            n_input += 1
            batch.append(line)
            if len(batch) < BATCH:
                continue
            in_flight.append((batch, pool.submit(examine_lines, batch)))
            batch = []
            if len(in_flight) >= max_in_flight:
                drain_one()
        in_flight.append((batch, pool.submit(examine_lines, batch)))  # the tail (maybe empty)
        while in_flight:
            drain_one()

    curated_shards, quarantine_shards, key_shards = curated.close(), quarantine.close(), kept_keys.close()
    if n_input == 0:
        raise EmptyDrop(f"the raw drop at {raw.url(drop_prefix(date))} is complete but holds no records (its "
                        "JSONL files are empty): nothing to prepare. A drop needs at least one record; "
                        f"`aigc make-raw --date {date} --n N` writes a synthetic one")
    n_quarantined = sum(reasons.values())
    if n_input != n_curated + n_quarantined:
        raise ReconciliationError(
            f"input {n_input} ≠ curated {n_curated} + quarantined {n_quarantined}: records were lost or doubled"
        )
    seconds = time.perf_counter() - started
    manifest = {
        "dataset": cfg.dataset, "date": date.isoformat(), "run_id": run_id, "raw": drop.uri,
        "input_records": n_input, "rows": n_curated, "quarantined": dict(sorted(reasons.items())),
        "bytes": sum(s["bytes"] for s in curated_shards), "shards": curated_shards,
        "quarantine": {"prefix": quarantine_run, "shards": quarantine_shards},
        "dedup_keys": key_shards, "dedup_settings": settings, "deduplicated_against": earlier,
        "workload": workload, "schema": rules.curated_schema.to_string(show_schema_metadata=False),
        "stats": {c: {"min": lo if n_curated else None, "max": hi if n_curated else None,
                      "mean": total / n_curated if n_curated else None} for c, (lo, hi, total) in stats.items()},
        "config": dataclasses.asdict(cfg), "seconds": round(seconds, 3),
    }
    lake.put_json(join(curated_run, MANIFEST), manifest)
    lake.put_json(join(quarantine_run, MANIFEST), {k: manifest[k] for k in ("date", "run_id", "quarantined")})
    return {
        "stage": "prepare", "date": date.isoformat(), "run_id": run_id, "input": n_input, "curated": n_curated,
        "quarantined": n_quarantined, "reasons": dict(sorted(reasons.items())),
        "staging_uri": lake.url(curated_run), "quarantine_uri": lake.url(quarantine_run),
        "shards": len(curated_shards), "seconds": round(seconds, 3),
        "rows_per_s": round(n_input / seconds, 1) if seconds else None,
        "dedup": dedup.stats() if hasattr(dedup, "stats") else None, "deduplicated_against": earlier,
    }


def publish_prepared(lake: Lake, dataset: str, date: str | dt.date, run_id: str) -> dict:
    """Publish a gated run: one pointer, the curated partition's, names the run's curated data and its
    quarantine, so both move together or neither does."""
    quarantine = partition("quarantine", dataset, date)
    c = publish(lake, partition("curated", dataset, date), run_id, companions=[quarantine], manifest=MANIFEST)
    return {"stage": "publish", "date": parse_date(date).isoformat(), "run_id": run_id,
            "curated_uri": lake.url(c["run_prefix"]), "quarantine_uri": lake.url(c["companions"][quarantine]),
            "replaced_run_id": c["previous_run_id"]}


def _announced_records(raw: Lake, date: dt.date) -> int | None:
    try:
        return int(raw.get_json(join(drop_prefix(date), SUCCESS)).get("records"))
    except (ValueError, TypeError, AttributeError):
        return None  # a bare marker is fine: the count is only for the progress bar


class _InlineExecutor(Executor):
    """One worker: decode in this process and skip the IPC."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _text(value) -> str | None:
    """A record's id or key for the quarantine's string columns (a malformed record may hold anything there)."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


@contextlib.contextmanager
def _executor(workers: int, drop: Lake, cfg: PrepareConfig, rules: RecordRules) -> Iterator[Executor]:
    if workers <= 1:
        init_worker(drop, cfg, rules)
        yield _InlineExecutor()
        return
    # forkserver: safe beside threads and any CUDA state in the parent (fork is not). Preloading
    # the worker and the rules' modules there means each worker forks with them (PIL, numpy) already imported.
    context = get_context("forkserver")
    context.set_forkserver_preload(["aigc.prepare.worker", type(rules).__module__])
    with worker_processes_allowed(), ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                         initializer=init_worker,
                                                         initargs=(drop, cfg, rules)) as pool:
        yield pool  # workers start lazily, on submits: allowed for the pool's whole life
