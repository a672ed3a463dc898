"""What the GPUs did during a task: pynvml read a few times a second on a thread beside it.

``GpuSampler`` reads each GPU's utilisation (the share of the last sample period a kernel ran), memory used, power
and temperature ``sample_hz`` times a second while the task runs; ``summary()`` gives, per GPU and for the task,
mean / p5 / p95 utilisation, the peak memory used, mean power and the highest temperature, and flags a task whose
mean utilisation is below ``TelemetryConfig.min_gpu_utilisation`` (the GPU waited for data or for the host: the
seed's "below 30 %" symptom). The training launcher samples its node's GPUs around torchrun; a generation shard
samples the GPU it serves on.

Without a GPU (or without a driver pynvml can read) nothing is sampled and the summary says so and why: a figure
that was never measured is never 0.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from aigc.config.telemetry import TelemetryConfig

if TYPE_CHECKING:
    from aigc.lake import Lake

log = logging.getLogger(__name__)


class GpuSampler:
    """``with GpuSampler([0, 1], cfg) as s: …`` then ``s.summary()``; ``gpus``: CUDA's device indices (under this
    process's ``CUDA_VISIBLE_DEVICES``). ``nvml``: pynvml, initialised (``aigc.devices.nvml()`` by default)."""

    def __init__(self, gpus: Sequence[int], cfg: TelemetryConfig, *, nvml=None,
                 clock: Callable[[], float] = time.monotonic, what: str = "this task"):
        self.gpus, self.cfg, self.clock, self.what = list(gpus), cfg, clock, what
        self.readings: dict[int, list[tuple[float, int, float | None, float | None]]] = {g: [] for g in self.gpus}
        """GPU → (utilisation 0-1, memory used in bytes, power in W or None, temperature in °C or None) a reading."""
        self._warned = False  # the low-utilisation warning: once per task, however often its summary is read
        self.names: dict[int, str] = {}
        self.reason: str | None = None
        self._nvml, self._handles = nvml, {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._ended = 0.0
        if not self.gpus:
            self.reason = f"no GPU: {self.what} ran on the CPU, so nothing was sampled"
        elif cfg.sample_hz <= 0:
            self.reason = "the GPU sampler is off (TelemetryConfig.sample_hz = 0)"

    # -- sampling ---------------------------------------------------------------------------
    def _open(self) -> bool:
        """The GPUs' NVML handles; False (and the reason kept) where pynvml cannot read them."""
        from aigc.devices import nvml, nvml_handle

        try:
            self._nvml = self._nvml or nvml()
            self._handles = {g: nvml_handle(self._nvml, g) for g in self.gpus}
            self.names = {g: _text(self._nvml.nvmlDeviceGetName(h)) for g, h in self._handles.items()}
            return True
        except Exception as e:  # no driver, no pynvml, a GPU gone: say so; the task itself goes on
            self.reason = f"pynvml cannot read GPU(s) {self.gpus} ({type(e).__name__}: {e}): nothing was sampled"
            log.warning("telemetry: %s", self.reason)
            return False

    def sample(self) -> None:
        """One reading of every GPU (the thread calls it ``sample_hz`` times a second)."""
        n = self._nvml
        for g, h in self._handles.items():
            utilisation = n.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            used = int(n.nvmlDeviceGetMemoryInfo(h).used)
            self.readings[g].append((utilisation, used, _optional(lambda h=h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
                                     _optional(lambda h=h: float(n.nvmlDeviceGetTemperature(
                                         h, getattr(n, "NVML_TEMPERATURE_GPU", 0))))))

    def _read(self) -> bool:
        try:
            self.sample()
            return True
        except Exception as e:  # a reading failed mid-task: keep what was read, say why it stopped
            self.reason = f"pynvml stopped answering after {self.samples} reading(s) ({type(e).__name__}: {e})"
            log.warning("telemetry: %s", self.reason)
            return False

    def _loop(self) -> None:
        period = 1.0 / self.cfg.sample_hz
        while not self._stop.wait(period) and self._read():
            pass

    @property
    def samples(self) -> int:
        return min((len(r) for r in self.readings.values()), default=0)

    def __enter__(self) -> GpuSampler:
        self._started = self.clock()
        if self.reason is None and self._open():
            self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._ended = self.clock()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            # The last reading as the task ends (NVML's utilisation covers the period just past, the task's), so a
            # task shorter than a sample period has one too; none before it, which would read the idle GPU.
            if self.reason is None:
                self._read()

    # -- what it says -----------------------------------------------------------------------
    def summary(self) -> dict:
        """Per GPU and for the task: what the GPUs did, and whether the task is flagged; or why nothing was
        recorded."""
        floor = self.cfg.min_gpu_utilisation
        per_gpu = [_gpu_figures(g, self.names.get(g, ""), rows) for g, rows in self.readings.items() if rows]
        if not per_gpu:
            return {"recorded": False, "reason": self.reason}
        every = np.array([u for rows in self.readings.values() for u, *_ in rows])
        mean = float(every.mean())
        figures = {"recorded": True, "sample_hz": self.cfg.sample_hz, "seconds": round(self._ended - self._started, 3),
                   "gpus": per_gpu, "utilisation_mean": round(mean, 4),
                   "utilisation_p5": round(float(np.percentile(every, 5)), 4),
                   "utilisation_p95": round(float(np.percentile(every, 95)), 4),
                   "peak_memory_bytes": max(g["peak_memory_bytes"] for g in per_gpu),
                   "min_gpu_utilisation": floor, "low_utilisation": mean < floor}
        if self.reason:  # sampling stopped early: the figures cover its start only
            figures["stopped"] = self.reason
        if figures["low_utilisation"] and not self._warned:
            self._warned = True
            log.warning("telemetry: %s kept its GPU(s) busy %.0f%% of the time on average, below the floor of "
                        "%.0f%% (TelemetryConfig.min_gpu_utilisation): the GPU waited, for data or for the host",
                        self.what, 100 * mean, 100 * floor)
        return figures


def _gpu_figures(gpu: int, name: str, rows: list[tuple]) -> dict:
    utilisation = np.array([r[0] for r in rows])
    power = [r[2] for r in rows if r[2] is not None]
    temperature = [r[3] for r in rows if r[3] is not None]
    return {"gpu": gpu, "name": name, "samples": len(rows), "utilisation_mean": round(float(utilisation.mean()), 4),
            "utilisation_p5": round(float(np.percentile(utilisation, 5)), 4),
            "utilisation_p95": round(float(np.percentile(utilisation, 95)), 4),
            "peak_memory_bytes": max(r[1] for r in rows),
            "power_w_mean": round(float(np.mean(power)), 1) if power else None,
            "temperature_c_max": max(temperature) if temperature else None}


def _optional(read: Callable[[], float]) -> float | None:
    """A reading some GPUs do not support (power on a MIG slice, for one): None rather than a failed task."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and its kin
        return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def sampler_for(device, cfg: TelemetryConfig, what: str, **kwargs) -> GpuSampler:
    """The sampler of a task on one ``torch.device`` (a generation shard): its GPU, or none on the CPU."""
    return GpuSampler([device.index or 0] if device.type == "cuda" else [], cfg, what=what, **kwargs)


def across_tasks(summaries: Sequence[dict], floor: float | None = None) -> dict:
    """A run's figures from its tasks' (a generation run's shards', a training run's nodes'): the mean utilisation
    weighted by readings, the peak memory, the tasks flagged (below ``floor``, else the floor the tasks were sampled
    under); or, where no task recorded any, why not (the first task's reason)."""
    recorded = [(i, s) for i, s in enumerate(summaries) if s.get("recorded")]
    if not recorded:
        reasons = [s.get("reason") for s in summaries if s.get("reason")]
        return {"recorded": False, "reason": reasons[0] if reasons else "no task reported GPU telemetry"}
    floor = recorded[0][1]["min_gpu_utilisation"] if floor is None else floor
    weights = [sum(g["samples"] for g in s["gpus"]) for _, s in recorded]
    mean = sum(w * s["utilisation_mean"] for w, (_, s) in zip(weights, recorded, strict=True)) / sum(weights)
    return {"recorded": True, "tasks": len(recorded), "of_tasks": len(summaries), "utilisation_mean": round(mean, 4),
            "peak_memory_bytes": max(s["peak_memory_bytes"] for _, s in recorded),
            "low_utilisation_tasks": [i for i, s in recorded if s["low_utilisation"]],
            "min_gpu_utilisation": floor, "low_utilisation": mean < floor}


NODE_FILE = "gpu-node-{}.json"
"""Beside a training run's summary: what one node's GPUs did (its launcher writes it; ``run_training``)."""
_NODE_NAME = re.compile(r"gpu-node-\d+\.json")


def training_figures(lake: Lake, run_prefix: str) -> dict:
    """A training run's GPU figures: its nodes' (``NODE_FILE``), as one run's; a run from before the sampler has
    none and says so."""
    keys = [k for k in lake.list(run_prefix, recursive=False) if _NODE_NAME.fullmatch(k.rsplit("/", 1)[-1])]
    if not keys:
        return {"recorded": False, "reason": "no GPU telemetry beside this run (trained without the launcher, or "
                                             "before the sampler)"}
    return across_tasks([lake.get_json(k) for k in keys])


def figures_shown(gpu: dict | None) -> dict:
    """A task's or run's GPU figures as a report or the view shows them: utilisation and peak memory, flagged
    where low; or why there are none."""
    if not gpu:
        return {"GPU": "not recorded"}
    if not gpu.get("recorded"):
        return {"GPU": f"not recorded: {gpu.get('reason')}"}
    floor = gpu["min_gpu_utilisation"]
    low = f" (below the floor of {floor:.0%}: the GPU waited)" if gpu.get("low_utilisation") else ""
    shown = {"GPU utilisation (mean)": f"{gpu['utilisation_mean']:.0%}{low}"}
    if "utilisation_p5" in gpu:
        shown["GPU utilisation (p5 / p95)"] = f"{gpu['utilisation_p5']:.0%} / {gpu['utilisation_p95']:.0%}"
    shown["GPU peak memory used"] = f"{gpu['peak_memory_bytes'] / 2**30:.2f} GiB"
    return shown
