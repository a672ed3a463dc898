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
