"""Which device a process runs on, and the rules that make GPU hosts work the first time.

Every decision reads torch and the environment through this module, so a unit test can fake a host with GPUs:

- ``pick_device``: ``cuda:LOCAL_RANK`` when CUDA is there (``LOCAL_RANK`` counts the GPUs that
  ``CUDA_VISIBLE_DEVICES`` leaves visible, as CUDA numbers them), a clear error when a rank has no GPU of its
  own, and a clear error instead of a silent CPU fallback when a GPU is required (``AIGC_REQUIRE_GPU``, set on
  the GPU workers of the Compose deployment) but torch cannot see one.
- ``processes_per_node``: torchrun's ``--nproc-per-node`` when the configuration says 0 (auto): one per
  visible GPU, else 2 gloo processes sharing the CPU.
- ``bf16_is_native``: bf16 autocast only where the GPU computes it natively (``including_emulation=False``: a T4
  emulates it, slower than fp32).
- ``nvml_handle_key``: the NVML device that is CUDA's device ``index``: NVML ignores ``CUDA_VISIBLE_DEVICES``, so
  with ``CUDA_VISIBLE_DEVICES=3`` CUDA's device 0 is NVML's 3 (or a UUID, as the variable may name GPUs);
  ``nvml`` (pynvml, initialised once a process) and ``nvml_handle`` read it for the batch budget and telemetry.
- ``device_class``: the GPU's model, or the CPU's threads: what a learned batch size holds for, and what stage 5
  times variants and recommends one per (a worker queue serves one class; generation reads its class's).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

REQUIRE_GPU_ENV = "AIGC_REQUIRE_GPU"
CPU_PROCESSES = 2
"""Processes per node on a host without GPUs when nproc is auto: two gloo ranks sharing the cores."""


class GpuRequired(RuntimeError):
    """A GPU is required here (``AIGC_REQUIRE_GPU``) and torch cannot see one."""


def gpu_required(env: dict[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(REQUIRE_GPU_ENV, "").strip().lower()
    return value in ("1", "true", "yes", "on")


def visible_gpus() -> int:
    import torch  # here, not at the top: the launcher and the Airflow task process ask without needing torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_device(local_rank: int = 0, require_gpu: bool | None = None) -> torch.device:
    """The device of the process with this ``local_rank`` (0 outside torchrun); see the module's doc."""
    import torch

    require_gpu = gpu_required() if require_gpu is None else require_gpu
    gpus = visible_gpus()
    if gpus:
        if local_rank >= gpus:
            raise ValueError(
                f"LOCAL_RANK={local_rank} but this host shows {gpus} GPU(s) (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): one process per GPU, so set the training "
                f"processes per node to at most {gpus} (TrainConfig.nproc, or 0 for one per visible GPU)")
        return torch.device("cuda", local_rank)
    if require_gpu:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise GpuRequired(
            f"{REQUIRE_GPU_ENV} is set but torch {torch.__version__} ({build}) sees no GPU: check the driver "
            "(nvidia-smi), the container's GPU reservation, and that the image installed a CUDA build of torch "
            "that this driver supports (see docs/compose.md); unset "
            f"{REQUIRE_GPU_ENV} to run on the CPU instead")
    return torch.device("cpu")


def processes_per_node(nproc: int) -> int:
    """``nproc`` itself, or for 0 (auto) one per visible GPU, else ``CPU_PROCESSES``."""
    if nproc:
        return nproc
    return visible_gpus() or CPU_PROCESSES


def bf16_is_native(device: torch.device) -> bool:
    import torch

    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


def nvml_handle_key(index: int, env: dict[str, str] | None = None) -> int | str:
    """The NVML index (int) or UUID (str) of CUDA's device ``index`` under ``CUDA_VISIBLE_DEVICES``."""
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if index >= len(entries):
        raise ValueError(f"CUDA device {index} is not among CUDA_VISIBLE_DEVICES={visible!r}")
    entry = entries[index]
    return int(entry) if entry.isdigit() else entry  # GPU-…/MIG-… UUIDs: looked up by UUID


@functools.cache
def nvml():
    """pynvml, initialised once per process (each nvmlInit takes a reference that nothing would release)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def synchronizer(device: str | torch.device):
    """What ends a timing on ``device``: on CUDA a synchronisation (kernels are queued; a clock read at launch
    measures the launch, not the work), elsewhere nothing."""
    import torch

    where = torch.device(device)
    if where.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(where)


def nvml_handle(pynvml, index: int):
    """NVML's handle of CUDA's device ``index`` (``nvml_handle_key``: by index, or by UUID)."""
    key = nvml_handle_key(index)
    return pynvml.nvmlDeviceGetHandleByIndex(key) if isinstance(key, int) else pynvml.nvmlDeviceGetHandleByUUID(key)


def device_class(device: str) -> str:
    """What a batch size learned on ``device`` holds for, as a lake key's part: the GPU's model (``nvidia-h100``…),
    or the CPU threads torch computes with (``cpu-2-threads``): another host of the same class measures alike.
    Stage 5's recommendations are kept per class too (``aigc.evaluate.devices``)."""
    import re

    import torch

    where = torch.device(device)
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else f"cpu-{torch.get_num_threads()}-threads"
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-")
