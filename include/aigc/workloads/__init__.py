"""Workloads: what the pipeline's core runs, chosen by name (the interface: ``aigc.workload``; the built-in ones
here: ``image``, ``text``, and the synthetic ``world`` both demos draw from)."""

from aigc.workload import Loss, RecordRules, TrainingTask, Workload
from aigc.workloads.registry import (
    BUILT_IN,
    ENTRY_POINT_GROUP,
    UnknownWorkload,
    available,
    default_workload,
    load_workload,
    workload_of,
)

__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "Loss", "RecordRules", "TrainingTask", "UnknownWorkload", "Workload",
           "available", "default_workload", "load_workload", "workload_of"]
