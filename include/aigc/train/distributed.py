"""The distribution layer: process group, device, precision, DDP and its gradient-health hook.

Models know nothing of this module. Under torchrun (RANK/WORLD_SIZE in the environment) it
joins the process group (gloo on CPU, nccl on GPUs); run plainly it is a world of one with no
process group and no DDP wrapper, which is what unit tests use.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from aigc.devices import bf16_is_native, pick_device
from aigc.procs import available_cpus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    local_world: int
    device: torch.device
    backend: str | None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def init_distributed(threads: int = 0, timeout_s: int = 1800) -> Dist:
    """Join torchrun's process group if there is one; pin the device and the CPU threads."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    device = pick_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # torchrun sets OMP_NUM_THREADS=1 for several processes; share the cores instead.
    torch.set_num_threads(threads or max(1, available_cpus() // local_world))
    backend = None
    if "RANK" in os.environ and world >= 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=dt.timedelta(seconds=timeout_s))
    return Dist(rank, world, local_rank, local_world, device, backend)


def shutdown(ctx: Dist) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        return "bf16" if bf16_is_native(device) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("TrainConfig.precision='fp16' needs a CUDA device (GradScaler); use bf16 or fp32 on CPU")
    return precision


def rng_state(device: torch.device) -> dict:
    """This process's random state: the CPU generator's and, on a GPU, the device's (dropout and sampling on the
    GPU draw from it: without it a resumed run would not draw what the uninterrupted one did)."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state, device: torch.device) -> None:
    """Undo ``rng_state`` (also a checkpoint's bare CPU state, as runs before the GPU state was kept wrote)."""
    state = state if isinstance(state, dict) else {"cpu": state}
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class GradHealth:
    """DDP comm-hook state: sums the squared local gradient (before the all-reduce) of each bucket.

    The hook sees each bucket's buffer just before it is reduced: that is this rank's own
    gradient (accumulated over its micro-steps), which no longer exists once DDP has averaged it.
    """

    def __init__(self, process_group, compression: str):
        self.process_group, self.compression = process_group, compression
        self.local_sq: torch.Tensor | None = None

    def reset(self) -> None:
        self.local_sq = None

    def local_norm(self) -> float:
        return float(self.local_sq.sqrt()) if self.local_sq is not None else 0.0


def _health_hook(state, bucket):  # no annotations: DDP compares them to dist.GradBucket, and they are strings here
    sq = bucket.buffer().detach().float().pow(2).sum()
    state.local_sq = sq if state.local_sq is None else state.local_sq + sq
    if state.compression == "fp16":
        return default_hooks.fp16_compress_hook(state.process_group, bucket)
    if state.compression == "bf16":
        return default_hooks.bf16_compress_hook(state.process_group, bucket)
    return default_hooks.allreduce_hook(state.process_group, bucket)


def wrap_model(model: nn.Module, ctx: Dist, compression: str) -> tuple[nn.Module, GradHealth | None]:
    """DDP with the health hook (and gradient compression, if asked) under torchrun; the model itself otherwise."""
    if not ctx.distributed:
        return model, None
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    health = GradHealth(dist.group.WORLD, compression)
    ddp.register_comm_hook(health, _health_hook)
    return ddp, health


def clip_then_average(model: nn.Module, ctx: Dist, max_norm: float, health: GradHealth | None) -> None:
    """Clip this rank's own gradient to ``max_norm`` (in the gradients' scale: a GradScaler's scale included), then
    average the ranks' gradients in one all-reduce (in the compression's dtype, if any): the step's micro-batches
    ran without DDP's own all-reduce (``no_sync``). The health check reads the local norm from before the clip."""
    params = [p for p in model.parameters() if p.grad is not None]
    local = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if health is not None:
        health.local_sq = local.detach().float().pow(2)
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    wire = flat.to({"fp16": torch.float16, "bf16": torch.bfloat16}.get(health.compression if health else "",
                                                                         flat.dtype))
    dist.all_reduce(wire)
    averaged = wire.to(flat.dtype) / ctx.world
    for g, a in zip(grads, _unflatten_dense_tensors(averaged, grads), strict=True):
        g.copy_(a)


def no_sync(model: nn.Module, synchronising: bool):
    """Skip DDP's all-reduce unless this micro-step's backward is the one that synchronises (the last one, unless
    each rank clips before averaging: ``clip_then_average``): gradients accumulate locally."""
    if isinstance(model, DDP) and not synchronising:
        return model.no_sync()
    return contextlib.nullcontext()


def all_mean(ctx: Dist, values: list[float] | torch.Tensor) -> list[float]:
    """The mean over ranks of each value (a list, or a float64 tensor on the rank's device: reduced in place
    and read back to the host once)."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=torch.float64, device=ctx.device)
    if ctx.distributed:
        dist.all_reduce(t)
        t = t / ctx.world
    return t.tolist()


def all_sum(ctx: Dist, values: list[float]) -> list[float]:
    if not ctx.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return t.tolist()


def gather_floats(ctx: Dist, value: float) -> list[float]:
    if not ctx.distributed:
        return [value]
    out = [torch.zeros(1, dtype=torch.float64, device=ctx.device) for _ in range(ctx.world)]
    dist.all_gather(out, torch.tensor([value], dtype=torch.float64, device=ctx.device))
    return [float(t) for t in out]


def gather_rng_states(ctx: Dist) -> list[dict]:
    """Every rank's ``rng_state``, gathered as byte tensors: no ``all_gather_object``, which unpickles whatever a
    peer sends (code execution for anyone who can join the group). Every rank's generator state has the same size
    (the same generator kinds on the same device type), so one ``all_gather`` per kind carries them."""
    mine = rng_state(ctx.device)
    if not ctx.distributed:
        return [mine]
    out: list[dict] = [{} for _ in range(ctx.world)]
    for kind in sorted(mine):
        local = mine[kind].to(ctx.device)
        parts = [torch.empty_like(local) for _ in range(ctx.world)]
        dist.all_gather(parts, local)
        for rank, part in enumerate(parts):
            out[rank][kind] = part.cpu()
    return out


def flag_ranks(norms: list[float], k: float) -> list[int]:
    """Ranks whose local gradient norm exceeds k × the median of the *other* ranks' norms.

    The median of the others, not of all: with two ranks the median of all is their mean,
    which a single outlier can never exceed k > 2 times.
    """
    flagged = []
    for r, norm in enumerate(norms):
        others = sorted(norms[:r] + norms[r + 1:])
        if not others:
            continue
        mid = len(others) // 2
        median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
        if norm > k * median:
            flagged.append(r)
    return flagged
