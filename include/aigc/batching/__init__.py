"""Memory-aware adaptive batching, model-agnostic: a memory model, a device probe, a planner and
a batcher that grows on success and backs off on out-of-memory, answering every item once."""

from aigc.batching.adaptive import AdaptiveBatcher, BatchReport, ItemTooLarge
from aigc.batching.memory import MemoryModel
from aigc.batching.planner import plan_batches
from aigc.batching.probe import DeviceProbe, MemoryInfo
from aigc.batching.sharding import smart_sharding

__all__ = ["AdaptiveBatcher", "BatchReport", "DeviceProbe", "ItemTooLarge", "MemoryInfo", "MemoryModel",
           "plan_batches", "smart_sharding"]
