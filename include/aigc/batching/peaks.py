"""Measuring a batch's peak memory, so the memory model is calibrated from what a batch really used.

* ``CudaPeaks``: ``torch.cuda.max_memory_allocated`` after resetting the peak before the batch: exact
  and free, so every batch is measured.
* ``CpuPeaks``: the CPU has no allocator statistics, and the process's resident set says little
  (the C allocator keeps freed memory and hands it out again without the RSS moving). So a
  ``TorchDispatchMode`` counts the bytes of every tensor storage created during the batch while it
  lives (views and in-place results share a storage and count once; weights made before the
  batch do not count), and keeps the highest total. Kernel-internal workspaces are not seen. It
  slows the batch it watches by 20–50 %, so only the first batch and every ``every``-th after it
  are measured, and the batcher does not time those (``intrusive``).
* ``ReportedPeaks``: a peak someone else reports (a simulated accountant, another allocator).

A meter is used as ``if meter.due(n): with meter.measuring(): run(); meter.peak()``.
"""

from __future__ import annotations

import contextlib
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMeter(ABC):
    intrusive = False
    """True when measuring slows the batch: the batcher then does not judge that batch's speed."""

    def due(self, batch_number: int) -> bool:
        return True

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        yield

    @abstractmethod
    def peak(self) -> float | None:
        """The peak of the batch last run inside ``measuring()``, or None if it was not measured."""


class ReportedPeaks(PeakMeter):
    def __init__(self, read: Callable[[], float | None]):
        self.read = read

    def peak(self) -> float | None:
        return self.read()


class CudaPeaks(PeakMeter):
    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        torch.cuda.reset_peak_memory_stats()
        yield

    def peak(self) -> float | None:
        return float(torch.cuda.max_memory_allocated())


class _StorageCounter(TorchDispatchMode):
    """Live bytes of the tensor storages created while it is active, and their highest total."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # otherwise entering the mode first imports torch._dynamo: 2 s, once per process

    def __init__(self) -> None:
        super().__init__()
        self.live = self.highest = 0
        self._seen: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            try:
                storage = t.untyped_storage()
            except (NotImplementedError, RuntimeError):  # tensors without a plain storage (quantized, sparse)
                continue
            key = storage.data_ptr()
            if key == 0 or key in self._seen:
                continue
            nbytes = storage.nbytes()
            self._seen.add(key)
            self.live += nbytes
            self.highest = max(self.highest, self.live)
            weakref.finalize(storage, self._freed, key, nbytes)  # the storage's Python object lives as long as it
        return out


class CpuPeaks(PeakMeter):
    intrusive = True

    def __init__(self, every: int = 16):
        self.every, self._last = every, None

    def due(self, batch_number: int) -> bool:
        return batch_number % self.every == 0

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        counter = _StorageCounter()
        self._last = None
        with counter:
            yield
        self._last = float(counter.highest)

    def peak(self) -> float | None:
        return self._last or None


def meter_for(device: str) -> PeakMeter:
    return CudaPeaks() if device.startswith("cuda") else CpuPeaks()
