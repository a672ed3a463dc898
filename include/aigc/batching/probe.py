"""How much memory a batch may use: pynvml on NVIDIA GPUs, cgroup limits and psutil on CPU."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aigc.devices import nvml, nvml_handle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryInfo:
    device: str
    total_bytes: int
    free_bytes: int
    source: str
    """Where the numbers came from: pynvml, cgroup, psutil, or configured."""


class DeviceProbe:
    """Free and total memory of the device a batch runs on; the budget is a fraction of it minus a margin."""

    def __init__(self, device: str = "cpu", *, budget_fraction: float = 0.8, safety_margin_bytes: int = 0,
                 budget_bytes: int = 0, cgroup_root: str = "/sys/fs/cgroup"):
        self.device, self.budget_fraction, self.safety_margin_bytes = device, budget_fraction, safety_margin_bytes
        self.fixed_budget, self.cgroup_root = budget_bytes, Path(cgroup_root)

    def info(self) -> MemoryInfo:
        if self.device.startswith("cuda"):
            gpu = self._nvml()
            if gpu:
                return gpu
        return self._cpu()

    def budget_bytes(self) -> int:
        """What a batch may take now: a configured budget, else fraction × free − margin (never < 0)."""
        if self.fixed_budget:
            return self.fixed_budget
        info = self.info()
        return max(0, int(self.budget_fraction * info.free_bytes) - self.safety_margin_bytes)

    def _nvml(self) -> MemoryInfo | None:
        try:
            pynvml = nvml()
            handle = nvml_handle(pynvml, int(self.device.split(":", 1)[1]) if ":" in self.device else 0)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return MemoryInfo(self.device, int(mem.total), int(mem.free), "pynvml")
        except Exception as e:  # no driver, no GPU: say so, fall back to the CPU's numbers
            log.error("pynvml cannot read %s (%s): sizing batches from host memory figures instead, which do not "
                      "describe the GPU", self.device, e)
            return None

    def _cpu(self) -> MemoryInfo:
        import psutil

        vm = psutil.virtual_memory()
        total, free, source = int(vm.total), int(vm.available), "psutil"
        limit = self._cgroup_limit()
        if limit is not None and limit < total:
            used = self._cgroup_usage() or 0
            total, free, source = limit, max(0, min(free, limit - used)), "cgroup"
        return MemoryInfo("cpu", total, free, source)

    def _read(self, *names: str) -> str | None:
        for name in names:
            path = self.cgroup_root / name
            try:
                return path.read_text().strip()
            except OSError:
                continue
        return None

    def _cgroup_limit(self) -> int | None:
        raw = self._read("memory.max", "memory/memory.limit_in_bytes")  # cgroup v2, then v1
        if raw is None or raw == "max":
            return None
        value = int(raw)
        return value if value < 1 << 60 else None  # v1 reports "unlimited" as a huge number

    def _cgroup_usage(self) -> int | None:
        raw = self._read("memory.current", "memory/memory.usage_in_bytes")
        return int(raw) if raw is not None else None
