"""Training data: the window of published curated partitions, decoded on demand, prefetched.

Every rank builds the same small index (ids, captions, shard and row of each sample: image
bytes are not read for it), computes the same balanced plan, and then decodes only the shards
its samples live in, keeping decoded shards in a bounded LRU cache. A background thread
assembles the next batches while the model trains on the current one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition
from aigc.lake.publish import NotPublished, resolve
from aigc.models.tokenizer import words
from aigc.train.balance import sample_cost

log = logging.getLogger(__name__)


class EmptyWindow(LookupError):
    """No published curated partition in the training window."""


class CorruptShard(RuntimeError):
    """A curated shard that cannot be read or decoded as the schema promises."""


@dataclass
class WindowIndex:
    """One row per curated sample in the window; images stay in the lake until a rank needs them."""

    partitions: list[dict]
    """Lineage: date, run id, manifest key and its sha256, rows, for every partition used."""
    shards: list[str]
    shard_of: np.ndarray  # (N,) int32 index into shards
    row_of: np.ndarray  # (N,) int32 row inside its shard
    ids: list[str]
    captions: list[str]
    costs: np.ndarray  # (N,) float64, from balance.sample_cost

    def __len__(self) -> int:
        return len(self.ids)

    def split(self, val_fraction: float, val_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(train, validation) sample indices, by a hash of the id: stable across runs, ranks and days."""
        bucket = np.array([int.from_bytes(hashlib.blake2b(i.encode(), digest_size=4).digest()) for i in self.ids],
                          dtype=np.uint64) / 2**32
        val = np.flatnonzero(bucket < val_fraction)[:val_max]
        train = np.setdiff1d(np.arange(len(self.ids)), val, assume_unique=True)
        return train, val


def load_window(lake: Lake, dataset: str, date: str | dt.date, days: int) -> WindowIndex:
    """The published curated partitions of the ``days`` days ending at ``date`` (missing days skipped)."""
    end = parse_date(date)
    parts, shards, shard_of, row_of, ids, captions, pixels, tokens = [], [], [], [], [], [], [], []
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
                table = lake.parquet_file(key).read(columns=["id", "caption", "width", "height"])
            except Exception as e:
                raise CorruptShard(f"curated shard {lake.url(key)} cannot be read as Parquet with columns "
                                   f"id, caption, width, height: {type(e).__name__}: {e}") from e
            n = table.num_rows
            shard_of.append(np.full(n, len(shards), dtype=np.int32))
            row_of.append(np.arange(n, dtype=np.int32))
            shards.append(key)
            ids += table.column("id").to_pylist()
            caps = table.column("caption").to_pylist()
            captions += caps
            pixels.append(table.column("width").to_numpy().astype(np.int64) * table.column("height").to_numpy())
            tokens.append(np.array([len(words(c)) for c in caps], dtype=np.int64))
    if not parts:
        first = partition("curated", dataset, end - dt.timedelta(days=days - 1))
        raise EmptyWindow(
            f"no published curated partition of {dataset!r} in the {days} day(s) ending {end}: "
            f"looked for {lake.url(first)}/_PUBLISHED.json … {lake.url(partition('curated', dataset, end))}"
            "/_PUBLISHED.json; run stage 1 (aigc prepare) for those dates first")
    return WindowIndex(parts, shards, _concat(shard_of, np.int32), _concat(row_of, np.int32), ids, captions,
                       sample_cost(_concat(pixels, np.int64), _concat(tokens, np.int64)))


def _concat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)


class ImageStore:
    """Decoded images by sample index: whole shards decoded once and kept, least recently used dropped."""

    def __init__(self, lake: Lake, index: WindowIndex, resolution: int, cache_bytes: int):
        self.lake, self.index, self.resolution, self.cache_bytes = lake, index, resolution, cache_bytes
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0
        self.decoded_shards = 0

    def _shard(self, s: int) -> np.ndarray:
        if s in self._cache:
            self._cache.move_to_end(s)
            return self._cache[s]
        key = self.index.shards[s]
        try:
            table = self.lake.parquet_file(key).read(columns=["id", "image"])
        except Exception as e:
            raise CorruptShard(f"curated shard {self.lake.url(key)} cannot be read: {type(e).__name__}: {e}") from e
        images = table.column("image").to_pylist()
        r = self.resolution
        out = np.empty((len(images), r, r, 3), dtype=np.uint8)  # (N, H, W, C)
        for i, data in enumerate(images):
            try:
                img = Image.open(io.BytesIO(data)).convert("RGB")
            except Exception as e:
                row_id = table.column("id")[i].as_py()
                raise CorruptShard(f"curated shard {self.lake.url(key)}: image of row {i} (id {row_id!r}) "
                                   f"does not decode: {type(e).__name__}: {e}") from e
            if img.size != (r, r):
                img = img.resize((r, r), Image.Resampling.BILINEAR)
            out[i] = np.asarray(img)
        self._cache[s] = out
        self._bytes += out.nbytes
        self.decoded_shards += 1
        while self._bytes > self.cache_bytes and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._bytes -= dropped.nbytes
        return out

    def images(self, samples: np.ndarray) -> torch.Tensor:
        """(B, 3, R, R) float32 in [0, 1] for sample indices, in their order."""
        r = self.resolution
        out = np.empty((len(samples), r, r, 3), dtype=np.uint8)
        shard_of, row_of = self.index.shard_of[samples], self.index.row_of[samples]
        for s in np.unique(shard_of):
            mask = shard_of == s
            out[mask] = self._shard(int(s))[row_of[mask]]
        return torch.from_numpy(out).permute(0, 3, 1, 2).float().div_(255.0)


class Batches:
    """Micro-batches ``(images, token_ids)`` for a list of sample-index arrays, built ahead in a thread."""

    def __init__(self, store: ImageStore, tokens: torch.Tensor, batches: list[np.ndarray], prefetch: int):
        self.store, self.tokens, self.batches = store, tokens, batches
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="aigc-prefetch", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            for samples in self.batches:
                item = (self.store.images(samples), self.tokens[torch.from_numpy(samples)])
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

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in self.batches:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
