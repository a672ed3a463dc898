"""GPU hosts, faked: which device a process takes, how many processes a node starts, when a GPU is required.

No GPU is needed: torch.cuda's answers are replaced by a host's (monkeypatch). What only a real GPU can show
(NCCL, CUDA RNG streams, bf16 kernels) runs in tests/gpu, which is skipped without one.
"""

import pytest
import torch

from aigc import devices
from aigc.devices import GpuRequired, nvml_handle_key, pick_device, processes_per_node
from aigc.train import distributed as D


@pytest.fixture
def host(monkeypatch):
    """host(gpus, bf16=..., native_bf16=...): torch.cuda as a host with that many visible GPUs shows it."""
    def make(gpus: int, native_bf16: bool = True, emulated_bf16: bool = True) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            return native_bf16 or (including_emulation and emulated_bf16)

        monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)

    return make


def test_each_local_rank_takes_its_own_visible_gpu(host, monkeypatch):
    host(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,6,7")  # CUDA renumbers these 0–3: LOCAL_RANK indexes them
    assert [pick_device(rank) for rank in range(4)] == [torch.device("cuda", i) for i in range(4)]


def test_a_rank_without_a_gpu_of_its_own_is_refused_with_the_fix(host, monkeypatch):
    host(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match=r"LOCAL_RANK=1 but this host shows 1 GPU\(s\).*at most 1"):
        pick_device(1)


def test_a_required_gpu_that_torch_cannot_see_fails_fast_instead_of_training_on_the_cpu(host, monkeypatch):
    host(0)
    monkeypatch.setenv(devices.REQUIRE_GPU_ENV, "1")
    with pytest.raises(GpuRequired, match=r"AIGC_REQUIRE_GPU is set but torch .* sees no GPU.*nvidia-smi"):
        pick_device(0)
    monkeypatch.setenv(devices.REQUIRE_GPU_ENV, "0")
    assert pick_device(0) == torch.device("cpu")
    monkeypatch.delenv(devices.REQUIRE_GPU_ENV)
    assert pick_device(0) == torch.device("cpu")  # a laptop: the CPU, as before


def test_training_processes_default_to_one_per_visible_gpu(host):
    host(8)
    assert processes_per_node(0) == 8 and processes_per_node(3) == 3
    host(0)
    assert processes_per_node(0) == devices.CPU_PROCESSES


def test_auto_precision_takes_bf16_only_where_it_is_native(host):
    cuda = torch.device("cuda", 0)
    host(1, native_bf16=True)
    assert D.resolve_precision("auto", cuda) == "bf16"
    host(1, native_bf16=False, emulated_bf16=True)  # a T4: bf16 only emulated, slower than fp32
    assert D.resolve_precision("auto", cuda) == "fp32"
    assert D.resolve_precision("auto", torch.device("cpu")) == "fp32"


@pytest.mark.parametrize(("visible", "index", "expected"), [
    (None, 1, 1), ("", 0, 0), ("3,5", 1, 5), (" 4 ", 0, 4), ("GPU-8a1b,GPU-77ce", 0, "GPU-8a1b"),
    ("MIG-0d3f", 0, "MIG-0d3f"),
])
def test_nvml_reads_the_gpu_cuda_calls_this_index(visible, index, expected):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert nvml_handle_key(index, env) == expected


def test_an_index_outside_cuda_visible_devices_is_an_error():
    with pytest.raises(ValueError, match="not among CUDA_VISIBLE_DEVICES"):
        nvml_handle_key(2, {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_a_checkpoints_random_state_includes_the_gpus_and_restores_it(monkeypatch):
    """Dropout and sampling on a GPU draw from the device's generator: a resumed run must get it back."""
    stored = {}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([7, 7], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: stored.update(state=state, device=device))
    cuda = torch.device("cuda", 1)
    torch.manual_seed(3)
    state = D.rng_state(cuda)
    expected = torch.rand(3)
    torch.manual_seed(4)
    D.restore_rng(state, cuda)
    assert torch.equal(torch.rand(3), expected)  # the CPU generator's state came back
    assert stored["device"] == cuda and stored["state"].tolist() == [7, 7]
    assert "cuda" not in D.rng_state(torch.device("cpu"))


def test_a_checkpoint_from_before_the_gpu_state_was_kept_still_resumes():
    torch.manual_seed(5)
    bare = torch.get_rng_state()  # what older checkpoints stored per rank
    expected = torch.rand(2)
    D.restore_rng(bare, torch.device("cpu"))
    assert torch.equal(torch.rand(2), expected)


def test_a_timing_on_cuda_ends_at_a_synchronisation_of_that_device_and_on_the_cpu_at_nothing(monkeypatch):
    import torch

    from aigc.devices import synchronizer

    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    synchronizer("cpu")()
    synchronizer("cuda:1")()
    assert synced == [torch.device("cuda", 1)]
