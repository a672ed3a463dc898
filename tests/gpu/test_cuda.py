"""What only a real GPU shows: the device rules of aigc.devices, the GPU's random state, the fp16 scaler, NVML.

Skipped, with the reason, on a host without CUDA (this project's CI machine has none); tests/unit/test_devices.py
covers the same rules with a faked torch.cuda. On a GPU host: ``.venv/bin/python -m pytest tests/gpu``.
"""

import math

import pytest
import torch

from aigc import devices
from aigc.batching import DeviceProbe
from aigc.train import distributed as D
from aigc.train.loop import optimizer_step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device on this host: the GPU checks need one (see tests/unit/"
                                       "test_devices.py for the same rules with a faked torch.cuda)")


def test_the_device_rules_on_this_host():
    gpus = torch.cuda.device_count()
    assert devices.pick_device(0, require_gpu=True) == torch.device("cuda", 0)
    assert devices.processes_per_node(0) == gpus
    with pytest.raises(ValueError, match=f"LOCAL_RANK={gpus}"):
        devices.pick_device(gpus)
    major, _ = torch.cuda.get_device_capability(0)
    assert devices.bf16_is_native(torch.device("cuda", 0)) == (major >= 8)  # Ampere and later compute bf16


def test_the_gpus_random_state_is_saved_and_restored():
    cuda = torch.device("cuda", 0)
    torch.cuda.manual_seed(1)
    state = D.rng_state(cuda)
    expected = torch.rand(4, device=cuda)
    torch.cuda.manual_seed(2)
    D.restore_rng(state, cuda)
    assert torch.equal(torch.rand(4, device=cuda), expected)


def test_an_fp16_overflow_is_a_skipped_step_on_the_gpu():
    model = torch.nn.Linear(8, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.full((2, 8), 6e4, device="cuda")).sum() * 1e4  # overflows fp16 once scaled
    scaler.scale(loss).backward()
    norm, skipped = optimizer_step(scaler, opt, model.parameters(), clip=1.0)
    assert skipped == 1 and not math.isfinite(norm)


def test_the_sampler_reads_a_working_gpus_utilisation_and_memory():
    """The telemetry sampler (aigc.telemetry) on this GPU while it multiplies matrices for 2 s: readings at its
    rate, the GPU busy most of that time, and at least the tensors' memory in use."""
    import time

    from aigc.config.telemetry import TelemetryConfig
    from aigc.telemetry import sampler_for

    with sampler_for(torch.device("cuda", 0), TelemetryConfig(sample_hz=20), "a matmul loop") as sampler:
        x = torch.randn(4096, 4096, device="cuda")
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for _ in range(10):
                x = x @ x
                x = x / x.norm()
            torch.cuda.synchronize()
    s = sampler.summary()
    assert s["recorded"] and s["gpus"][0]["samples"] >= 20, s
    assert s["utilisation_mean"] > 0.5 and s["peak_memory_bytes"] >= 3 * 4096 * 4096 * 4, s


def test_nvml_reads_the_memory_of_the_gpu_cuda_uses():
    free, total = torch.cuda.mem_get_info(0)
    info = DeviceProbe("cuda:0").info()
    assert info.source == "pynvml" and abs(info.total_bytes - total) <= 0.02 * total
