"""Where a variant runs, so that its latency and its batch budget are measured on that device."""

import onnxruntime as ort
import pytest
import torch

from aigc.registry.loader import serving_device

GPU = torch.device("cuda", 0)


@pytest.mark.parametrize("variant", ["fp32", "bf16", "pruned"])
def test_torch_variants_run_on_the_workers_device(variant):
    assert serving_device(variant, GPU) == GPU
    assert serving_device(variant, torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("variant", ["onnx", "int8"])
def test_onnx_variants_use_the_gpu_only_with_onnxruntimes_cuda_provider(variant, monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert serving_device(variant, GPU) == torch.device("cpu")  # onnxruntime (CPU build) on a GPU worker
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert serving_device(variant, GPU) == GPU


def test_auto_is_bf16_on_cuda_where_gate_3_passed_it_else_fp32():
    from aigc.registry.loader import served_variant

    assert served_variant("auto", ["fp32", "bf16"], GPU) == "bf16"
    assert served_variant("auto", ["fp32"], GPU) == "fp32"  # bf16 failed gate 3
    assert served_variant("auto", ["fp32", "bf16"], torch.device("cpu")) == "fp32"  # mostly emulated on a CPU
    assert served_variant("int8", ["fp32", "int8"], GPU) == "int8"  # a variant asked for by name is served as is


def test_auto_on_a_cuda_worker_serves_the_fastest_eligible_variant_gate_3_timed_on_a_gpu():
    """Where the gpu queue's worker built and timed the variants, auto on a CUDA worker serves the fastest of those
    gate 3 passed, by its per-sample latency at the larger batch; a variant timed on the CPU (an ONNX one without
    onnxruntime's CUDA provider) or not passed is not a candidate; on a CPU worker the rule stays."""
    from aigc.registry.loader import served_variant, timed_on_gpu

    def entry(device, b64):
        return {"device": device, "latency_batch": 64, "latency_ms_b1": 9.0, "latency_ms_b64": b64}

    record = {"variants": {"fp32": entry("cuda:0", 0.40), "bf16": entry("cuda:0", 0.31),
                           "pruned": entry("cuda:0", 0.25), "int8": entry("cpu", 0.05), "onnx": entry("cuda:0", 0.2)}}
    timed = timed_on_gpu(record, ["fp32", "bf16", "pruned", "int8"])  # onnx did not pass gate 3
    assert timed == {"fp32": 0.40, "bf16": 0.31, "pruned": 0.25}
    assert served_variant("auto", ["fp32", "bf16", "pruned", "int8"], GPU, timed) == "pruned"
    assert served_variant("auto", ["fp32", "bf16"], torch.device("cpu"), timed) == "fp32"
    cpu_built = {"variants": {k: {**v, "device": "cpu"} for k, v in record["variants"].items()}}
    assert timed_on_gpu(cpu_built, ["fp32", "bf16"]) == {}  # nothing timed on a GPU: bf16 on CUDA, as before
    assert served_variant("auto", ["fp32", "bf16"], GPU, timed_on_gpu(cpu_built, ["fp32", "bf16"])) == "bf16"
