"""One rank's training: the same function on 1 CPU process, N GPUs or several hosts.

Rank 0 writes (checkpoints, metrics, the model); every rank computes the same data plan and
joins every collective, so ranks stay in lockstep. The position in the data is the optimizer
step alone: a resumed run recomputes the epoch's plan and skips to that step.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import logging
import math
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from aigc import faults
from aigc.config import PipelineConfig
from aigc.lake import Lake
from aigc.lake.keys import parse_date
from aigc.train import distributed as D
from aigc.train.artifacts import metric_row, training_run_prefix, write_final, write_metrics
from aigc.train.balance import imbalance, plan_for, step_imbalance
from aigc.train.checkpoint import check_resumable, load_latest, save_checkpoint
from aigc.train.data import Batches, load_window
from aigc.train.timing import BusyClock

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

log = logging.getLogger(__name__)
GC_EVERY = 50  # steps between the young generations' collections, on every rank (see train_rank)


def optimizer_step(scaler: torch.amp.GradScaler, opt: torch.optim.Optimizer, params, clip: float) -> tuple[float, int]:
    """Unscale, clip, step and update: (the gradient norm before clipping, 1 if the scaler skipped the step).

    fp16: a step whose gradients overflowed is skipped by the scaler, which then lowers its scale. Its infinite
    norm is the scaler at work, not a diverging run: the metrics row says so and gate 2 leaves it out.
    """
    scaler.unscale_(opt)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip or float("inf")))
    scale = scaler.get_scale() if scaler.is_enabled() else None
    scaler.step(opt)
    scaler.update()
    return grad_norm, int(scale is not None and scaler.get_scale() < scale)


def lr_lambda(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine down to ``min_ratio`` at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def resume_key(cfg: PipelineConfig, date: dt.date, workload: Workload) -> dict:
    """What must match to resume: what a step means. nproc/nodes may change (batches are global)."""
    t = cfg.train
    return {"date": date.isoformat(), "dataset": cfg.prepare.dataset, "workload": cfg.workload.name,
            "model": cfg.model.__dict__, **workload.settings(cfg),
            **{k: getattr(t, k) for k in ("window_days", "steps", "batch_size", "grad_accum", "lr", "min_lr_ratio",
                                           "warmup_steps", "weight_decay", "seed", "val_fraction", "val_max", "split")}}


def train_rank(lake: Lake, date: str | dt.date, cfg: PipelineConfig, run_id: str, ctx: D.Dist,
               workload: Workload) -> dict | None:
    """Train (or resume) run ``run_id`` of ``workload``; rank 0 returns the summary, the others None."""
    date, t, m = parse_date(date), cfg.train, cfg.model
    started = time.perf_counter()
    prefix = training_run_prefix(m.name, date, run_id)
    precision = D.resolve_precision(t.precision, ctx.device)

    workload.require("train")
    index = load_window(lake, cfg.prepare.dataset, date, t.window_days, workload.index_columns,
                        lambda columns: workload.sample_costs(columns, cfg))
    train_idx, val_idx = index.split(t.val_fraction, t.val_max)
    task = workload.training_task(lake, index, cfg)
    micro = t.micro_batch(ctx.world)
    per_step = micro * t.grad_accum  # samples per rank per optimizer step
    steps_per_epoch = len(train_idx) // (per_step * ctx.world)
    if steps_per_epoch == 0:
        raise ValueError(f"the training window holds {len(train_idx)} training samples; "
                         f"TrainConfig.batch_size={t.batch_size} needs at least that many "
                         "(lower it or widen the window)")
    if ctx.is_main:
        log.info("workload %s: %d partition(s), %d samples (%d train, %d validation); "
                 "%d rank(s) × %d micro × %d accum; %d steps per epoch; precision %s",
                 workload.name, len(index.partitions), len(index), len(train_idx), len(val_idx), ctx.world, micro,
                 t.grad_accum, steps_per_epoch, precision)

    torch.manual_seed(t.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = task.build_model().to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_lambda(s, t.warmup_steps, t.steps, t.min_lr_ratio))
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=precision == "fp16")

    start_step, rows, resumed_from = 0, [], None
    key = resume_key(cfg, date, workload)
    found = load_latest(lake, prefix)
    if found:
        pointer, state = found
        check_resumable(state["resume_key"], key, lake.url(pointer["key"]))
        if state.get("data_state", state.get("vocab")) != task.data_state:
            raise ValueError(f"cannot resume from {lake.url(pointer['key'])}: the curated window changed since "
                             "it was written (the data now defines another vocabulary); start a new run")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        rng = state["rng"]
        D.restore_rng(rng[ctx.rank % len(rng)], ctx.device)
        start_step, rows, resumed_from = state["step"], list(state["metrics"]), state["step"]
        if ctx.is_main:
            log.info("resuming run %s from step %d (%s)", run_id, start_step, lake.url(pointer["key"]))
    else:
        torch.manual_seed(t.seed * 1000 + ctx.rank)  # per-rank noise (a VAE's sampling, dropout)

    ddp, health = D.wrap_model(model, ctx, t.grad_compression)
    clock = BusyClock(ctx.device)
    costs = index.costs[train_idx]
    val_mine = val_idx[ctx.rank::ctx.world]

    def validate() -> float:
        model.eval()
        total = 0.0
        with torch.no_grad(), D.autocast(precision, ctx.device):
            for chunk in np.array_split(val_mine, max(1, math.ceil(len(val_mine) / 256))):
                if len(chunk):
                    batch = tuple(x.to(ctx.device) for x in task.batch(chunk))
                    total += float(task.loss(model, batch, train=False).total) * len(chunk)
        model.train()
        loss_sum, n = D.all_sum(ctx, [total, float(len(val_mine))])
        return loss_sum / max(n, 1.0)

    def checkpoint(step: int) -> None:
        rng = D.gather_rng_states(ctx)
        if ctx.is_main:
            save_checkpoint(lake, prefix, step, {
                "step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "scaler": scaler.state_dict(), "rng": rng,
                "resume_key": key, "data_state": task.data_state, "metrics": rows, "config": cfg.to_dict()})
            write_metrics(lake, prefix, rows, workload.loss_parts, workload.loss_title)

    if not rows:  # step 0: the untrained model's validation loss, the yardstick of gate 2
        rows.append(metric_row(0, epoch=0, val_loss=validate()))
    initial_val = rows[0]["val_loss"]
    if ctx.is_main and not resumed_from:
        log.info("initial validation loss %.5f", initial_val)
    flagged_steps = sum(1 for r in rows if r["flagged_ranks"])
    last_val_step, last = next(((r["step"], r["val_loss"]) for r in reversed(rows) if math.isfinite(r["val_loss"])),
                               (0, float("nan")))
    last_val = f"val {last:.5f}"
    epoch_plan, epoch, batches = None, -1, None
    step = start_step
    # Python's collector would run whenever allocations pass its threshold: a full collection (100 ms and more in
    # a process holding torch, pyarrow and the workload) landing inside one rank's timed span reads as that rank
    # being slow, and on a step of a millisecond it is all gate 2 sees. So it runs on every rank at the same steps,
    # outside the spans (torchtitan's GarbageCollection does the same).
    collecting = gc.isenabled()
    gc.disable()
    try:
        while step < t.steps:
            e, k = divmod(step, steps_per_epoch)
            if e != epoch:  # a new epoch (or the resumed one): its plan, from step k on
                epoch = e
                plan = plan_for(t.split, costs, ctx.world, per_step, t.seed, epoch)  # (steps, world, per_step)
                epoch_plan = (imbalance(costs, plan), step_imbalance(costs, plan))
                if batches:
                    batches.close()
                mine = [train_idx[s] for s in plan[k:, ctx.rank].reshape(-1, micro)]
                batches_iter = iter(batches := Batches(task.batch, mine, t.prefetch_batches))
                clock.background = batches.thread_cpu_s
                if ctx.is_main:
                    log.info("epoch %d: imbalance %.4f (per step %.4f) of assigned cost over %d rank(s)",
                             epoch, *epoch_plan, ctx.world)
            t0 = time.perf_counter()
            # The loss, then its logged parts, summed on the device: no host synchronisation per micro-step (on a GPU
            # each `float()` would wait for the queued kernels); one transfer per step, with the all-reduce.
            sums = torch.zeros(1 + len(workload.loss_parts), dtype=torch.float64, device=ctx.device)
            for a in range(t.grad_accum):
                last = a == t.grad_accum - 1
                with clock.host():
                    batch = tuple(x.to(ctx.device, non_blocking=True) for x in next(batches_iter))
                clock.add(batches.take_build_s())
                with D.no_sync(ddp, last), D.autocast(precision, ctx.device):
                    with clock.device():
                        out = task.loss(ddp, batch, train=True)
                        faults.delay("train.forward", ctx.rank)
                    # The synchronising backward holds the wait for the slowest rank: not this rank's own work.
                    with contextlib.nullcontext() if last else clock.device():
                        scaler.scale(out.total / t.grad_accum).backward()
                parts = (out.total, *(out.parts[p] for p in workload.loss_parts))
                sums += torch.stack([v.detach().to(torch.float64) for v in parts]) / t.grad_accum
            grad_norm, skipped = optimizer_step(scaler, opt, model.parameters(), t.clip_grad_norm)
            lr = sched.get_last_lr()[0]
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1

            loss, *part_means = D.all_mean(ctx, sums)  # reads back: this step's device work is done
            row = metric_row(step, epoch=epoch, loss=loss, lr=lr, grad_norm=grad_norm, skipped_step=skipped,
                             parts=dict(zip(workload.loss_parts, part_means, strict=True)),
                             samples_per_s=t.batch_size / (time.perf_counter() - t0),
                             imbalance=epoch_plan[0], step_imbalance=epoch_plan[1],
                             rank_busy_s=D.gather_floats(ctx, clock.take()))
            if health is not None and step % t.health_every == 0:
                norms = D.gather_floats(ctx, health.local_norm())
                flagged = D.flag_ranks(norms, t.health_k)
                row.update(rank_norm_min=min(norms), rank_norm_max=max(norms),
                           flagged_ranks=",".join(map(str, flagged)))
                if flagged:
                    flagged_steps += 1
                    if ctx.is_main:
                        log.warning("step %d: rank(s) %s have local gradient norms %s, > %.1f× the others' median",
                                    step, flagged, [round(n, 4) for n in norms], t.health_k)
            if health is not None:
                health.reset()
            if step % t.eval_every == 0 or step == t.steps:
                row["val_loss"] = validate()
                last_val = f"val {row['val_loss']:.5f}"
            rows.append(row)
            if ctx.is_main and (step % max(1, t.steps // 20) == 0 or step == t.steps):
                # Validation runs every eval_every steps: between runs, the latest figure and its step.
                shown = last_val if math.isfinite(row["val_loss"]) else f"{last_val} (step {last_val_step})"
                log.info("step %d/%d  loss %.5f  %s  lr %.2e  |g| %.3f  %.0f samples/s",
                         step, t.steps, loss, shown, lr, grad_norm, row["samples_per_s"])
            if math.isfinite(row["val_loss"]):
                last_val_step = step
            if step % GC_EVERY == 0:
                gc.collect(1)
            if not math.isfinite(loss):
                raise FloatingPointError(f"training loss became {loss} at step {step}; last checkpoint kept")
            if step % t.checkpoint_every == 0 or step == t.steps:
                checkpoint(step)
                if ctx.is_main:
                    faults.point("train.checkpoint", step)
    finally:
        if collecting:
            gc.enable()
        if batches:
            batches.close()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        gc.collect()

    if not ctx.is_main:
        return None
    return write_final(lake, prefix, model=model, task=task, workload=workload, cfg=cfg, rows=rows, index=index,
                       run_id=run_id, date=date, world=ctx.world, precision=precision, resumed_from=resumed_from,
                       initial_val=initial_val, flagged_steps=flagged_steps, seconds=time.perf_counter() - started)
