"""Stage 5 per device class: the variants timed where they serve, a recommendation per class, and ``auto`` serving
its worker's class's (issue 43). The timing loop, the recommendation rule and the serving choice are the real ones;
the judge answers on a fake clock at a set cost per (device, variant), since this host has no GPU."""

from types import SimpleNamespace

import pytest
import torch

import aigc.devices
from aigc.config import PipelineConfig
from aigc.evaluate import devices
from aigc.evaluate.stage import (
    Judge,
    Judged,
    measure_grid,
    recommend_on_evidence,
    recommend_per_class,
    time_on_this_worker,
)
from aigc.quality.evaluation import alignment_checks
from aigc.registry.loader import recommended_for, served_variant

ELIGIBLE = ["fp32", "bf16", "int8"]
# Milliseconds per sample: on the CPU int8 (ONNX Runtime) is fastest and bf16 emulated; on the GPU bf16 is.
COST = {"cpu": {"fp32": 10.0, "bf16": 30.0, "int8": 2.0}, "cuda": {"fp32": 1.0, "bf16": 0.4, "int8": 2.0}}
GPU = "nvidia-h100-80gb-hbm3"


class Priced(Judge):
    """Every variant equally right; answers advance a fake clock by their device's cost (a batch of one per
    prompt costs half as much again)."""

    def __init__(self):
        cfg = PipelineConfig().override({"evaluate": {"latency_rounds": 3, "latency_prompts": 8}})
        super().__init__(None, SimpleNamespace(version="v0001", eligible=ELIGIBLE, record={}), cfg, None)
        self.now, self.loaded = 0.0, []

    def content(self, generated):
        raise AssertionError("not used")

    def eval_prompts(self, k):
        return [{"prompt": f"p{i}", "seed": i} for i in range(k)]

    def load(self, version, variant, device="cpu"):
        self.loaded.append((variant, torch.device(device).type))
        return variant, torch.device(device).type

    def judge(self, serving, prompts):
        return Judged.of([True] * len(prompts), 0.95)

    def answer(self, serving, policy, prompts):
        variant, where = serving
        self.now += COST[where][variant] * len(prompts) * (1.5 if policy == "batch1" else 1.0) / 1000
        return [None] * len(prompts)


@pytest.fixture
def one_gpu_model(monkeypatch):
    """A host whose CUDA device 0 is an H100 as far as the device class reads it (the name only: nothing runs on
    it but the priced judge)."""
    def device_class(device: str) -> str:
        return GPU if device.startswith("cuda") else "cpu-2-threads"

    monkeypatch.setattr(devices, "device_class", device_class)
    monkeypatch.setattr(aigc.devices, "device_class", device_class)


def test_each_device_class_is_recommended_its_fastest_variant_and_auto_serves_its_workers_class(
        monkeypatch, one_gpu_model):
    judge = Priced()
    monkeypatch.setattr(devices, "clock", lambda: judge.now)
    cfg, prompts = judge.cfg, judge.eval_prompts(64)
    grid, verdicts, scores = measure_grid(judge, prompts, cfg)  # on the evaluation's CPU
    assert {p["variant"]: p["latency_ms"] for p in grid if p["policy"] == "adaptive"} == pytest.approx(COST["cpu"])
    cpu_choice, _ = recommend_on_evidence(judge, prompts, grid, verdicts, cfg, scores)
    assert (cpu_choice["variant"], cpu_choice["policy"]) == ("int8", "adaptive")

    synced = []  # each timed batch ends at a synchronisation: CUDA's launch time is not latency
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: synced.append((str(device), judge.now)))
    timing = devices.timing_of(judge, prompts[:8], cfg, torch.device("cuda", 0))
    assert len(synced) == 1 + 3 * 4 and {d for d, _ in synced} == {"cuda:0"}
    # int8 is ONNX Runtime without its CUDA provider here: a GPU worker would run it on its CPU, so it is not timed
    assert timing["device_class"] == GPU and set(timing["rounds_ms"]) == {
        "fp32/batch1", "fp32/adaptive", "bf16/batch1", "bf16/adaptive"}
    assert ("int8", "cuda") not in judge.loaded and timing["rounds_ms"]["bf16/adaptive"] == pytest.approx([0.4] * 3)
    by_class = recommend_per_class(judge, prompts, verdicts, cfg, scores, grid, [timing])
    assert by_class[GPU]["recommended"]["variant"] == "bf16" and by_class[GPU]["device"] == "cuda:0"
    assert {p["variant"] for p in by_class[GPU]["front"]} == {"bf16"}
    assert all(p["device_class"] == GPU for p in by_class[GPU]["points"])

    recommended = {"cpu-2-threads": cpu_choice, GPU: by_class[GPU]["recommended"]}
    assert served_variant("auto", ELIGIBLE, torch.device("cuda", 0), None, recommended) == "bf16"
    assert served_variant("auto", ELIGIBLE, torch.device("cpu"), None, recommended) == "int8"
    assert served_variant("fp32", ELIGIBLE, torch.device("cuda", 0), None, recommended) == "fp32"  # forced
    # A variant gate 3 did not pass for this version is not served, whatever was recommended for production.
    assert served_variant("auto", ["fp32", "int8"], torch.device("cuda", 0), None, recommended) == "fp32"


def test_a_class_reads_its_own_recommendation_and_a_cpu_any_cpus():
    by_device = {"cpu-2-threads": {"variant": "int8"}, GPU: {"variant": "bf16"}}
    assert recommended_for(by_device, "cpu-16-threads", ELIGIBLE) == "int8"  # another CPU: the CPU's choice
    assert recommended_for(by_device, "nvidia-a10", ELIGIBLE) is None  # another GPU model: its own or none
    assert recommended_for(by_device, GPU, ["fp32"]) is None
    assert recommended_for({"cpu-evaluation": {"variant": "int8"}}, "cpu-2-threads", ELIGIBLE) == "int8"


def test_a_worker_without_cuda_times_nothing_and_says_why():
    found = time_on_this_worker(None, {}, PipelineConfig(), None, device=torch.device("cpu"))
    assert found["device_class"] is None and "no CUDA device" in found["reason"]


def test_a_gpu_class_recommended_another_variant_has_its_own_gate_5_check():
    """What a GPU worker will serve meets gate 5's minimum as the CPU's recommendation does: an interval below
    the minimum fails its own check, named after the class."""
    t = PipelineConfig().evaluate_gate
    good = {"value": 0.95, "lo": 0.92, "hi": 0.97, "n": 648, "confidence": 0.95}
    weak = {"value": 0.5, "lo": 0.45, "hi": 0.55, "n": 648, "confidence": 0.95}
    metrics = {"intervals": {"alignment": good, "model_alignment": good, "model_alignment_by_device": {GPU: weak}},
               "generated": 64}
    checks = {c.column: c for c in alignment_checks(metrics, t, ("day", "{figure} < {minimum}"),
                                                     ("model", "{figure} < {minimum}"))}
    column = "model_alignment_nvidia_h100_80gb_hbm3"
    assert checks["model_alignment"].passed and not checks[column].passed
    assert GPU in checks[column].title and "0.500" in checks[column].failure


def test_a_failed_timing_on_the_gpu_worker_says_why_and_the_evaluation_goes_on(monkeypatch):
    from aigc.evaluate import stage
    from aigc.stages import EVALUATE

    def fails(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(stage, "time_on_this_worker", fails)
    found = EVALUATE.time_here(None, {}, PipelineConfig())
    assert found["device_class"] is None and "illegal memory access" in found["reason"]


def test_a_version_whose_classes_picked_nothing_serves_productions_recommendation():
    from aigc.generate.run import recommendations

    records = {"v0002": {"version": "v0002", "recommended_by_device": {"cpu-2-threads": None}},
               "v0001": {"version": "v0001", "recommended_by_device": {"cpu-2-threads": {"variant": "int8"}}}}
    registry = SimpleNamespace(aliases=lambda: {"aliases": {"production": "v0001"}}, get=records.__getitem__)
    assert recommendations(registry, records["v0002"]) == {
        "recommended_by_device": {"cpu-2-threads": {"variant": "int8"}}, "recommended_by": "v0001"}
