"""``aigc prepare``: a raw drop → curated Parquet shards + quarantine, in a run's staging folder.

Streaming in bounded windows: the main process reads lines, worker processes apply the workload's
record rules (parse, fetch attachments such as images with threads for S3 latency, decode, check,
sign), and the main process deduplicates in drop order and writes. At most ``window`` records are
in flight, whatever the drop size. Nothing is published here: the gate audits the run folder, then
``publish_prepared`` points the partition at it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing import get_context

from aigc.config import PrepareConfig
from aigc.lake import Lake
from aigc.lake.keys import parse_date, partition
from aigc.lake.publish import new_run_id, publish
from aigc.prepare import delivery
from aigc.prepare.curate import MANIFEST, Curator, ReconciliationError, origin_of, raw_uri
from aigc.prepare.drop import RawLine, announced_records, drop_prefix, iter_lines, record_files
from aigc.prepare.records import Examined, Rejected
from aigc.prepare.worker import examine_lines, init_worker
from aigc.procs import available_cpus, worker_processes_allowed
from aigc.progress import progress
from aigc.workload import RecordRules

log = logging.getLogger(__name__)
__all__ = ["MANIFEST", "ReconciliationError", "prepare", "publish_prepared"]
BATCH = 256  # lines per task sent to a decoding process: amortises the IPC


def prepare(raw: Lake, lake: Lake, date: str | dt.date, cfg: PrepareConfig, run_id: str | None = None, *,
            rules: RecordRules, workload: str) -> dict:
    """Prepare the drop of ``date`` from ``raw`` into ``lake`` by the record ``rules`` of the workload named
    ``workload``, on this host; returns the JSON summary. (``aigc.prepare.fanout`` does the same across tasks.)"""
    date = parse_date(date)
    started = time.perf_counter()
    files = record_files(raw, date)  # DropNotFound before anything is written
    snap = delivery.snapshot(raw, date, files)
    redelivered = delivery.redelivery(lake, cfg.dataset, date, snap)
    expected = announced_records(raw, date)
    curator = Curator(lake, date, run_id or new_run_id(), cfg, rules)
    delivery.write(lake, curator.curated_run, snap)
    n_input = 0
    with examining(raw.sub(drop_prefix(date)), cfg, rules) as examine:
        lines = iter_lines(raw, files, cfg.max_line_bytes)
        for lines_, examined in examine(progress(lines, desc=f"prepare {date}", total=expected, unit="rec")):
            n_input += len(lines_)
            feed(curator, rules, lines_, examined)
    delivery.check_unchanged(raw, lake, date, curator.curated_run, snap["digest"], "while it was being prepared")
    return curator.finish(n_input, raw_uri(raw, date), time.perf_counter() - started, workload,
                          drop=delivery.summary(snap), redelivered=redelivered)


def feed(curator: Curator, rules: RecordRules, lines: list[RawLine], examined: Examined) -> None:
    """An examined batch of lines into the curator in line order: each rejection where it falls, the candidates
    between two rejections at once (the fan-out's merge feeds it the same way, so both write the same bytes)."""
    keys, origins, first = [], [], 0  # the pending run of candidates, from candidate number `first`

    def candidates() -> None:
        nonlocal keys, origins, first
        if keys:
            stop = first + len(keys)
            curator.candidates(keys, origins, {n: c[first:stop] for n, c in examined.columns.items()})
            keys, origins, first = [], [], stop

    for line, (record, attachment, verdict) in zip(lines, examined.outcomes, strict=True):
        if isinstance(verdict, Rejected):
            candidates()
            curator.reject(origin_of(line, record, rules), verdict, attachment)
        else:
            keys.append(verdict)
            origins.append(origin_of(line, record, rules))
    candidates()


@contextlib.contextmanager
def examining(drop: Lake, cfg: PrepareConfig, rules: RecordRules) -> Iterator:
    """A function from lines to (batch of lines, ``Examined``) pairs, in order, examined by ``cfg.workers``
    processes with at most ``cfg.window`` records in flight."""
    workers = cfg.workers or available_cpus()
    max_in_flight = max(2 * workers, cfg.window // BATCH)

    def examine(lines: Iterable[RawLine]) -> Iterator[tuple[list[RawLine], Examined]]:
        in_flight: deque[tuple[list[RawLine], Future]] = deque()
        batch: list[RawLine] = []
        for line in lines:
            batch.append(line)
            if len(batch) < BATCH:
                continue
            in_flight.append((batch, pool.submit(examine_lines, batch)))
            batch = []
            if len(in_flight) >= max_in_flight:
                lines_, future = in_flight.popleft()
                yield lines_, future.result()
        if batch:
            in_flight.append((batch, pool.submit(examine_lines, batch)))
        while in_flight:
            lines_, future = in_flight.popleft()
            yield lines_, future.result()

    with _executor(workers, drop, cfg, rules) as pool:
        yield examine


def publish_prepared(lake: Lake, dataset: str, date: str | dt.date, run_id: str) -> dict:
    """Publish a gated run: one pointer, the curated partition's, names the run's curated data and its
    quarantine, so both move together or neither does."""
    quarantine = partition("quarantine", dataset, date)
    c = publish(lake, partition("curated", dataset, date), run_id, companions=[quarantine], manifest=MANIFEST)
    lake.delete_prefix(partition("parts", dataset, date))  # a fan-out's intermediate parts, this run's and older
    return {"stage": "publish", "date": parse_date(date).isoformat(), "run_id": run_id,
            "curated_uri": lake.url(c["run_prefix"]), "quarantine_uri": lake.url(c["companions"][quarantine]),
            "replaced_run_id": c["previous_run_id"]}


class _InlineExecutor(Executor):
    """One worker: decode in this process and skip the IPC."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


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
