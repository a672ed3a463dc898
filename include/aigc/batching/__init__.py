"""Memory-aware adaptive batching, model-agnostic: a memory model, a device probe and a batcher that grows on
success and backs off on out-of-memory, answering every item once."""

from aigc.batching.adaptive import AdaptiveBatcher, BatchReport, ItemTooLarge
from aigc.batching.memory import MemoryModel
from aigc.batching.peaks import CpuPeaks, CudaPeaks, PeakMeter, ReportedPeaks, meter_for
from aigc.batching.probe import DeviceProbe, MemoryInfo

__all__ = ["AdaptiveBatcher", "BatchReport", "CpuPeaks", "CudaPeaks", "DeviceProbe", "ItemTooLarge", "MemoryInfo",
           "MemoryModel", "PeakMeter", "ReportedPeaks", "meter_for"]
