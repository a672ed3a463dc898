"""Training data: the window of published curated partitions, read on demand, prefetched.

Every rank builds the same small index (ids, the workload's index columns such as captions, the
shard and row of each sample: the payload, images or long texts, is not read for it), computes the
same balanced plan, and then reads only the shards its samples live in (the workload's
``TrainingTask.batch``). A background thread assembles the next batches while the model trains on
the current one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition
from aigc.lake.publish import NotPublished, resolve

log = logging.getLogger(__name__)


class EmptyWindow(LookupError):
    """No published curated partition in the training window."""


class CorruptShard(RuntimeError):
    """A curated shard that cannot be read or decoded as the schema promises."""


@dataclass
class WindowIndex:
    """One row per curated sample in the window; the payload stays in the lake until a rank needs it."""

    partitions: list[dict]
    """Lineage: date, run id, manifest key and its sha256, rows, for every partition used."""
    shards: list[str]
    shard_of: np.ndarray  # (N,) int32 index into shards
    row_of: np.ndarray  # (N,) int32 row inside its shard
    ids: list[str]
    columns: dict[str, list]
    """The index columns asked for (``Workload.index_columns``), one value per sample."""
    costs: np.ndarray  # (N,) float64: the workload's sample_costs (ones when none was given)
    shard_bytes: list[int | None] | None = None
    """Each shard's size as its manifest recorded it: a reader must see exactly that many bytes."""

    def shard(self, lake, s: int):
        """Shard ``s`` as a streamed Parquet file, its size checked against the manifest's."""
        return lake.parquet_file(self.shards[s], self.shard_bytes[s] if self.shard_bytes else None)

    def __len__(self) -> int:
        return len(self.ids)

    def split(self, val_fraction: float, val_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(train, validation) sample indices, by a hash of the id: stable across runs, ranks and days."""
        bucket = np.array([int.from_bytes(hashlib.blake2b(i.encode(), digest_size=4).digest()) for i in self.ids],
                          dtype=np.uint64) / 2**32
        val = np.flatnonzero(bucket < val_fraction)[:val_max]
        train = np.setdiff1d(np.arange(len(self.ids)), val, assume_unique=True)
        return train, val


def load_window(lake: Lake, dataset: str, date: str | dt.date, days: int, columns: Sequence[str],
                costs: Callable[[dict[str, list]], np.ndarray] | None = None) -> WindowIndex:
    """The published curated partitions of the ``days`` days ending at ``date`` (missing days skipped), with
    ``columns`` of every row read; ``costs`` (a workload's ``sample_costs``) turns them into per-sample costs."""
    end = parse_date(date)
    parts, shards, sizes, shard_of, row_of, ids = [], [], [], [], [], []
    values: dict[str, list] = {c: [] for c in columns}
    for back in range(days - 1, -1, -1):
        day = end - dt.timedelta(days=back)
        try:
            pointer = resolve(lake, partition("curated", dataset, day))
        except NotPublished:
            continue
        manifest_key = join(pointer["run_prefix"], pointer.get("manifest", "_manifest.json"))
        raw_manifest = lake.get_bytes(manifest_key)
        manifest = json.loads(raw_manifest)
        parts.append({"date": day.isoformat(), "run_id": pointer["run_id"], "manifest": lake.url(manifest_key),
                      "manifest_sha256": hashlib.sha256(raw_manifest).hexdigest(), "rows": manifest["rows"]})
        for shard in manifest["shards"]:
            key = shard["key"]
            try:
                table = lake.parquet_file(key, shard.get("bytes")).read(columns=["id", *columns])
            except Exception as e:
                raise CorruptShard(f"curated shard {lake.url(key)} cannot be read as Parquet with columns "
                                   f"{', '.join(['id', *columns])}: {type(e).__name__}: {e}") from e
            n = table.num_rows
            shard_of.append(np.full(n, len(shards), dtype=np.int32))
            row_of.append(np.arange(n, dtype=np.int32))
            shards.append(key)
            sizes.append(shard.get("bytes"))
            ids += table.column("id").to_pylist()
            for c in columns:
                values[c] += table.column(c).to_pylist()
    if not parts:
        first = partition("curated", dataset, end - dt.timedelta(days=days - 1))
        raise EmptyWindow(
            f"no published curated partition of {dataset!r} in the {days} day(s) ending {end}: "
            f"looked for {lake.url(first)}/_PUBLISHED.json … {lake.url(partition('curated', dataset, end))}"
            "/_PUBLISHED.json; run stage 1 (aigc prepare) for those dates first")
    weights = np.asarray(costs(values), dtype=np.float64) if costs else np.ones(len(ids))
    if weights.shape != (len(ids),) or not np.isfinite(weights).all() or (weights <= 0).any():
        raise ValueError(f"sample costs must be {len(ids)} finite positive numbers, one per sample; got shape "
                         f"{weights.shape}, min {weights.min() if weights.size else None}")
    return WindowIndex(parts, shards, _concat(shard_of, np.int32), _concat(row_of, np.int32), ids, values, weights,
                       sizes)


def _concat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)


class Batches:
    """Micro-batches (``make(samples)``: a workload's ``TrainingTask.batch``) for a list of sample-index arrays,
    built ahead in a thread.

    The thread's CPU time is kept apart so that a rank's measured work (``timing.BusyClock``) holds each batch's
    building once, as the batch is consumed (``take_build_s``), and not whatever share of the building a
    scheduler happened to run during the rank's timed spans (``thread_cpu_s`` is subtracted from them): a rank
    that waited at an all-reduce built its next batch there, untimed, and the slower rank did not."""

    def __init__(self, make: Callable[[np.ndarray], tuple[torch.Tensor, ...]], batches: list[np.ndarray],
                 prefetch: int, thread_clock: Callable[[], float] = time.thread_time):
        self.make, self.batches = make, batches
        self.thread_clock = thread_clock  # the building thread's CPU seconds (a test passes a fake one)
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._built_s = 0.0
        self._final_cpu_s = 0.0
        self._thread = threading.Thread(target=self._fill, name="aigc-prefetch", daemon=True)
        self._thread.start()
        try:
            self._clock_id = time.pthread_getcpuclockid(self._thread.ident)
        except (AttributeError, OSError):  # a platform without per-thread CPU clocks (or the thread has ended)
            self._clock_id = None

    def _fill(self) -> None:
        try:
            for samples in self.batches:
                t0 = self.thread_clock()
                item = (self.make(samples), self.thread_clock() - t0)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as e:  # handed to the consumer: a corrupt shard fails the step that needs it
            self._queue.put(e)
        finally:
            self._final_cpu_s = time.thread_time()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        for _ in self.batches:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            batch, built_s = item
            self._built_s += built_s
            yield batch

    def take_build_s(self) -> float:
        """CPU seconds the thread spent building the batches consumed since the last call (0 where the thread's
        time cannot be kept apart: its building is then in the spans it overlapped)."""
        built, self._built_s = self._built_s, 0.0
        return built if self._clock_id is not None else 0.0

    def thread_cpu_s(self) -> float:
        """The building thread's CPU time so far (0 where the platform cannot read it)."""
        if self._clock_id is None:
            return 0.0
        try:
            return time.clock_gettime(self._clock_id)
        except OSError:  # the thread has ended: its last reading
            return self._final_cpu_s

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
