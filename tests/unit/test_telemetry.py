"""The GPU sampler (aigc.telemetry) against a scripted pynvml: what it reads, what it says of it, and what it says
when there is nothing to read. The real pynvml on a real GPU: tests/gpu."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
import torch

from aigc.config.telemetry import TelemetryConfig
from aigc.telemetry import GpuSampler, across_tasks, sampler_for


class ScriptedNvml:
    """pynvml's calls the sampler makes, answering from per-GPU scripts (utilisation in %, memory used in bytes);
    a script's last value repeats. ``fail_after``: readings before utilisation reads raise, as a lost driver's do."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, utilisation: dict[int, list[int]], used: dict[int, list[int]], *, power_mw: int | None = 250_000,
                 fail_after: int | None = None):
        self.utilisation, self.used, self.power_mw, self.fail_after = utilisation, used, power_mw, fail_after
        self.asked: dict[int, int] = dict.fromkeys(utilisation, 0)

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802 - pynvml's names
        if index not in self.utilisation:
            raise RuntimeError(f"NVML: no GPU {index}")
        return index

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        return b"NVIDIA Scripted 80GB"

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        n = self.asked[handle]
        if self.fail_after is not None and n >= self.fail_after:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        self.asked[handle] += 1
        script = self.utilisation[handle]
        return types.SimpleNamespace(gpu=script[min(n, len(script) - 1)], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        script = self.used[handle]
        return types.SimpleNamespace(used=script[min(self.asked[handle] - 1, len(script) - 1)], total=80 << 30)

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        if self.power_mw is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.power_mw

    def nvmlDeviceGetTemperature(self, handle, sensor):  # noqa: N802
        return 61


def test_the_summary_gives_each_gpus_utilisation_percentiles_peak_memory_power_and_temperature(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    util = {0: [90, 95, 10, 99, 97, 96, 93, 98], 1: [20, 30, 25, 35, 40, 22, 28, 31]}
    used = {0: [1 << 30, 3 << 30, 7 << 30, 2 << 30], 1: [5 << 30]}
    nvml = ScriptedNvml(util, used)
    sampler = GpuSampler([0, 1], TelemetryConfig(min_gpu_utilisation=0.3), nvml=nvml)
    sampler._open()
    for _ in range(8):
        sampler.sample()
    s = sampler.summary()
    zero, one = s["gpus"]
    assert zero["name"] == "NVIDIA Scripted 80GB" and zero["samples"] == one["samples"] == 8
    assert zero["utilisation_mean"] == pytest.approx(np.mean(util[0]) / 100, abs=1e-4)
    assert zero["utilisation_p5"] == pytest.approx(np.percentile(util[0], 5) / 100, abs=1e-4)
    assert one["utilisation_p95"] == pytest.approx(np.percentile(util[1], 95) / 100, abs=1e-4)
    assert zero["peak_memory_bytes"] == 7 << 30 and one["peak_memory_bytes"] == 5 << 30
    assert s["peak_memory_bytes"] == 7 << 30
    assert zero["power_w_mean"] == 250.0 and zero["temperature_c_max"] == 61
    # The task's: every reading of every GPU; its mean (0.56) is above the floor, though GPU 1 alone (0.29) is not.
    assert s["utilisation_mean"] == pytest.approx(np.mean(util[0] + util[1]) / 100, abs=1e-4)
    assert s["recorded"] and not s["low_utilisation"]


def test_a_task_below_the_utilisation_floor_is_flagged_and_said_so(caplog):
    nvml = ScriptedNvml({0: [12, 25, 18, 30]}, {0: [1 << 30]}, power_mw=None)  # no power reading: None, not 0
    sampler = GpuSampler([0], TelemetryConfig(min_gpu_utilisation=0.3), nvml=nvml, what="generation shard 3")
    sampler._open()
    for _ in range(4):
        sampler.sample()
    s = sampler.summary()
    assert s["low_utilisation"] and s["utilisation_mean"] == pytest.approx(0.2125)
    assert s["gpus"][0]["power_w_mean"] is None
    assert "generation shard 3" in caplog.text and "TelemetryConfig.min_gpu_utilisation" in caplog.text
    assert sampler.summary()["low_utilisation"] and caplog.text.count("below the floor") == 1  # said once


def test_the_sampler_reads_on_its_own_thread_while_the_task_runs_and_stops_with_it():
    nvml = ScriptedNvml({0: [80]}, {0: [1 << 30]})
    sampler = GpuSampler([0], TelemetryConfig(sample_hz=100), nvml=nvml)
    with sampler:
        deadline = time.monotonic() + 30
        while sampler.samples < 3:
            assert time.monotonic() < deadline, "the sampler took no reading in 30 s"
            time.sleep(0.01)
    taken = sampler.samples
    assert not any(t.name == "gpu-telemetry" for t in threading.enumerate())  # stopped, joined
    assert sampler.samples == taken and sampler.summary()["gpus"][0]["samples"] == taken
    assert sampler.summary()["seconds"] > 0


def test_a_driver_lost_mid_task_keeps_what_was_read_and_says_why_it_stopped():
    nvml = ScriptedNvml({0: [70, 80, 90]}, {0: [1 << 30]}, fail_after=3)
    with GpuSampler([0], TelemetryConfig(sample_hz=100), nvml=nvml) as sampler:
        deadline = time.monotonic() + 30
        while sampler._thread.is_alive():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    s = sampler.summary()
    assert s["recorded"] and s["gpus"][0]["samples"] == 3 and "NVML_ERROR_GPU_IS_LOST" in s["stopped"]


def test_without_a_gpu_or_a_driver_nothing_is_recorded_and_the_summary_says_why():
    cfg = TelemetryConfig()
    with sampler_for(torch.device("cpu"), cfg, "generation shard 0") as cpu:
        pass
    assert cpu.summary() == {"recorded": False,
                             "reason": "no GPU: generation shard 0 ran on the CPU, so nothing was sampled"}

    class NoDriver:
        def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
            raise RuntimeError("NVML Shared Library Not Found")

    with GpuSampler([0], cfg, nvml=NoDriver()) as lost:
        pass
    assert not lost.summary()["recorded"] and "NVML Shared Library Not Found" in lost.summary()["reason"]
    with GpuSampler([0], TelemetryConfig(sample_hz=0), nvml=ScriptedNvml({0: [50]}, {0: [1]})) as off:
        pass
    assert "sample_hz = 0" in off.summary()["reason"]


def test_a_shard_on_cuda_1_samples_the_nvml_gpu_that_is_cudas_1(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # NVML numbers every GPU of the host
    nvml = ScriptedNvml({5: [60]}, {5: [2 << 30]})
    sampler = sampler_for(torch.device("cuda", 1), TelemetryConfig(), "generation shard 0", nvml=nvml)
    assert sampler._open()
    sampler.sample()
    assert nvml.asked == {5: 1} and sampler.summary()["gpus"][0]["gpu"] == 1


def test_a_runs_figures_weigh_each_task_by_its_readings_and_name_the_flagged_ones():
    def task(mean, samples, peak, low):
        return {"recorded": True, "gpus": [{"samples": samples}], "utilisation_mean": mean,
                "peak_memory_bytes": peak, "low_utilisation": low}

    run = across_tasks([task(0.9, 30, 4 << 30, False), task(0.1, 10, 6 << 30, True),
                        {"recorded": False, "reason": "no GPU"}], floor=0.3)
    assert run["utilisation_mean"] == pytest.approx((0.9 * 30 + 0.1 * 10) / 40)
    assert run["peak_memory_bytes"] == 6 << 30 and run["low_utilisation_tasks"] == [1]
    assert (run["tasks"], run["of_tasks"], run["low_utilisation"]) == (2, 3, False)
    assert across_tasks([{"recorded": False, "reason": "no GPU: shard 0 ran on the CPU"}], 0.3) == {
        "recorded": False, "reason": "no GPU: shard 0 ran on the CPU"}


def test_the_settings_are_checked_and_say_where_to_change_them():
    with pytest.raises(ValueError, match=r"min_gpu_utilisation must be in \[0.0, 1.0\].*--min-gpu-utilisation"):
        TelemetryConfig(min_gpu_utilisation=30)
    with pytest.raises(ValueError, match=r"sample_hz"):
        TelemetryConfig(sample_hz=-1)


def test_a_training_runs_figures_are_its_nodes_and_are_shown_flagged_where_low(tmp_path):
    from aigc.lake import LocalLake
    from aigc.telemetry import NODE_FILE, figures_shown, training_figures

    lake = LocalLake(tmp_path / "lake")
    prefix = "training/m/dt=2026-12-01/run=r1"
    assert not training_figures(lake, prefix)["recorded"]  # a run with no node file says so
    for node, util in ((0, [10, 20]), (1, [30, 40])):
        sampler = GpuSampler([0], TelemetryConfig(min_gpu_utilisation=0.3),
                             nvml=ScriptedNvml({0: util}, {0: [(node + 1) << 30]}))
        sampler._open()
        sampler.sample()
        sampler.sample()
        lake.put_json(f"{prefix}/{NODE_FILE.format(node)}", sampler.summary())
    lake.put_json(f"{prefix}/gpu-node-notes.json", {"recorded": True})  # not a node's file: not read
    run = training_figures(lake, prefix)
    assert run["utilisation_mean"] == pytest.approx(0.25) and run["peak_memory_bytes"] == 2 << 30
    assert run["low_utilisation"] and run["low_utilisation_tasks"] == [0] and run["min_gpu_utilisation"] == 0.3
    assert figures_shown(run) == {"GPU utilisation (mean)": "25% (below the floor of 30%: the GPU waited)",
                                  "GPU peak memory used": "2.00 GiB"}
    assert figures_shown(None) == {"GPU": "not recorded"}
