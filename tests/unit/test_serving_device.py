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
