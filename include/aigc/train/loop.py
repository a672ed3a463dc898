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
from aigc.train import feedback
from aigc.train.artifacts import metric_row, training_run_prefix, write_final, write_metrics
from aigc.train.balance import imbalance, plan_for, step_imbalance
from aigc.train.checkpoint import ResumeMismatch, check_resumable, load_latest, save_checkpoint
from aigc.train.data import Batches, load_window
from aigc.train.timing import BusyClock
from aigc.train.warm_start import Start, choose_start, fitted

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
                                           "warmup_steps", "weight_decay", "seed", "val_fraction", "val_max", "split",
                                           "init_from")},
            # Only where labels change the window: a checkpoint written before the setting existed still resumes.
            **({"review_feedback": t.review_feedback, "review_upweight": t.review_upweight}
               if t.review_feedback != "off" else {})}


def train_rank(lake: Lake, date: str | dt.date, cfg: PipelineConfig, run_id: str, ctx: D.Dist,
               workload: Workload) -> dict | None:
    """Train (or resume) run ``run_id`` of ``workload``; rank 0 returns the summary, the others None.

    Set up (the window's plan, the model and its optimizer), resume from the last checkpoint, then step, evaluate
    and checkpoint until the configured step count; each part is a method of ``RankRun``."""
    run = RankRun(lake, parse_date(date), cfg, run_id, ctx, workload)
    run.resume()
    run.train()
    return run.finish() if ctx.is_main else None


class RankRun:
    """One rank's view of a training run: what it trains on, the model and its optimizer, and its metrics."""

    def __init__(self, lake: Lake, date: dt.date, cfg: PipelineConfig, run_id: str, ctx: D.Dist,
                 workload: Workload):
        t = cfg.train
        self.lake, self.date, self.cfg, self.run_id, self.ctx, self.workload = lake, date, cfg, run_id, ctx, workload
        self.started = time.perf_counter()
        self.prefix = training_run_prefix(cfg.model.name, date, run_id)
        self.precision = D.resolve_precision(t.precision, ctx.device)

        workload.require("train")
        self.index = load_window(lake, cfg.prepare.dataset, date, t.window_days, workload.index_columns,
                                 lambda columns: workload.sample_costs(columns, cfg))
        self.train_idx, val_idx = self.index.split(t.val_fraction, t.val_max)
        # A retry keeps what its checkpoint started from (a promotion since changes nothing); a new run looks now.
        self.found = load_latest(lake, self.prefix)
        self.labels, self.feedback = self.reviewed(val_idx)
        self.task = workload.training_task(lake, self.index, cfg)
        self.micro = t.micro_batch(ctx.world)
        self.per_step = self.micro * t.grad_accum  # samples per rank per optimizer step
        self.steps_per_epoch = len(self.train_idx) // (self.per_step * ctx.world)
        if self.steps_per_epoch == 0:
            raise ValueError(f"the training window holds {len(self.train_idx)} training samples; "
                             f"TrainConfig.batch_size={t.batch_size} needs at least that many "
                             "(lower it or widen the window)")
        if ctx.is_main:
            log.info("workload %s: %d partition(s), %d samples (%d train, %d validation); "
                     "%d rank(s) × %d micro × %d accum; %d steps per epoch; precision %s",
                     workload.name, len(self.index.partitions), len(self.index), len(self.train_idx), len(val_idx),
                     ctx.world, self.micro, t.grad_accum, self.steps_per_epoch, self.precision)

        pinned = (self.found[1].get("start") or {"version": None}) if self.found else None
        self.start: Start = choose_start(lake, cfg.model.name, t.init_from, self.task, pinned)
        torch.manual_seed(t.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        self.model = self.task.build_model().to(ctx.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: lr_lambda(s, t.warmup_steps, t.steps, t.min_lr_ratio))
        self.scaler = torch.amp.GradScaler(ctx.device.type, enabled=self.precision == "fp16")
        self.key = resume_key(cfg, date, workload)
        self.step, self.rows, self.resumed_from = 0, [], None
        self.start_val_loss: float | None = None
        self.costs = self.index.costs[self.train_idx]
        self.val_mine = val_idx[ctx.rank::ctx.world]
        self.clock = BusyClock(ctx.device)
        self.ddp = self.health = None
        self.flagged_steps = 0
        self.epoch, self.epoch_plan, self.batches, self.batches_iter = -1, None, None, None

    def reviewed(self, val_idx: np.ndarray) -> tuple[list[dict] | None, dict | None]:
        """Reviewers' labels applied to the training split (``aigc.train.feedback``): (the labels used, what they
        did), or (None, None) with ``review_feedback=off``. A resumed run uses its checkpoint's labels."""
        t, workload = self.cfg.train, self.workload
        pinned = self.found[1].get("review_labels") if self.found else None
        if t.review_feedback == "off":
            if pinned is not None:  # the resume key names the setting only when on (older checkpoints resume)
                raise ResumeMismatch(f"cannot resume training run {self.run_id} with review_feedback=off: its "
                                     "checkpoint trained on a window reviewers' labels changed; start a new run "
                                     "(another --run-id) or restore the setting")
            return None, None
        column = workload.prompt_column
        if column not in self.index.columns:
            raise ValueError(f"TrainConfig.review_feedback={t.review_feedback!r} traces labels to the samples of "
                             f"their prompts, and workload {workload.name!r} names no prompt column among its index "
                             f"columns (Workload.prompt_column={column!r}): set review_feedback=off")
        labels, undated = (pinned, None) if pinned is not None else feedback.labels_for(
            self.lake, self.cfg.model.name, self.date)
        self.train_idx, record = feedback.apply(labels, t.review_feedback, t.review_upweight,
                                                self.index.columns[column], self.train_idx)
        record["undated_left_out"] = undated
        # Every rank must train on the same split: an import landing while they started would part them.
        seen = D.gather_floats(self.ctx, float(int(record["labels_sha256"][:12], 16)))
        if len(set(seen)) > 1:
            raise RuntimeError(f"training run {self.run_id}: the ranks read different review labels (an import "
                               "landed while they started); a retry reads them again")
        if self.ctx.is_main:
            log.info("review labels (%s): %d label(s) from %d review run(s); %d prompt(s) judged wrong, %d "
                     "training sample(s) of them; %d training samples → %d (validation %d, untouched)",
                     t.review_feedback, record["labels"], len(record["review_runs"]), record["prompts_wrong"],
                     record["samples_matched"], record["training_samples_before"],
                     record["training_samples_after"], len(val_idx))
        return labels, {**record, "resumed_with_checkpoint_labels": pinned is not None}

    def resume(self) -> None:
        """Continue from the run's last checkpoint (the same key, the same data), or seed a fresh start."""
        ctx, t = self.ctx, self.cfg.train
        found = self.found
        if found:
            pointer, state = found
            check_resumable(state["resume_key"], self.key, self.lake.url(pointer["key"]))
            if state.get("data_state", state.get("vocab")) != self.task.data_state:
                raise ValueError(f"cannot resume from {self.lake.url(pointer['key'])}: the curated window changed "
                                 "since it was written (the data now defines another vocabulary); start a new run")
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.sched.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            rng = state["rng"]
            D.restore_rng(rng[ctx.rank % len(rng)], ctx.device)
            self.step, self.rows, self.resumed_from = state["step"], list(state["metrics"]), state["step"]
            self.start_val_loss = (state.get("start") or {}).get("val_loss")
            if ctx.is_main:
                log.info("resuming run %s from step %d (%s)", self.run_id, self.step, self.lake.url(pointer["key"]))
        else:
            if self.start.weights is not None:
                # Gate 2's yardstick stays the untrained model's loss; the start's own loss says what the run added.
                self.rows.append(metric_row(0, epoch=0, val_loss=self.validate()))
                self.start = fitted(self.model, self.start)
                if self.start.version:
                    self.start_val_loss = self.validate()
                    if ctx.is_main:
                        log.info("starting from %s: validation loss %.5f on this window (untrained %.5f)",
                                 self.start.version, self.start_val_loss, self.rows[0]["val_loss"])
            torch.manual_seed(t.seed * 1000 + ctx.rank)  # per-rank noise (a VAE's sampling, dropout)
        self.ddp, self.health = D.wrap_model(self.model, ctx, t.grad_compression)

    def validate(self) -> float:
        """The validation loss over every rank's share of the held-out samples."""
        model, ctx, task = self.model, self.ctx, self.task
        model.eval()
        total = 0.0
        with torch.no_grad(), D.autocast(self.precision, ctx.device):
            for chunk in np.array_split(self.val_mine, max(1, math.ceil(len(self.val_mine) / 256))):
                if len(chunk):
                    batch = tuple(x.to(ctx.device) for x in task.batch(chunk))
                    total += float(task.loss(model, batch, train=False).total) * len(chunk)
        model.train()
        loss_sum, n = D.all_sum(ctx, [total, float(len(self.val_mine))])
        return loss_sum / max(n, 1.0)

    @property
    def start_record(self) -> dict:
        """What the run started from, as its checkpoint, summary and model card keep it."""
        return {**self.start.to_dict(), "val_loss": self.start_val_loss}

    def checkpoint(self) -> None:
        """Every rank's random state; rank 0 writes the checkpoint (what a retry resumes from) and the metrics."""
        rng = D.gather_rng_states(self.ctx)
        if self.ctx.is_main:
            save_checkpoint(self.lake, self.prefix, self.step, {
                "step": self.step, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(), "scaler": self.scaler.state_dict(), "rng": rng,
                "resume_key": self.key, "data_state": self.task.data_state, "metrics": self.rows,
                "start": self.start_record, "review_labels": self.labels,
                "config": self.cfg.to_dict()})
            write_metrics(self.lake, self.prefix, self.rows, self.workload.loss_parts, self.workload.loss_title)
            faults.point("train.checkpoint", self.step)

    def _batches_for(self, step: int) -> None:
        """At an epoch's start (or the resumed one): its plan, and this rank's batches from ``step`` on."""
        ctx, t = self.ctx, self.cfg.train
        e, k = divmod(step, self.steps_per_epoch)
        if e == self.epoch:
            return
        self.epoch = e
        plan = plan_for(t.split, self.costs, ctx.world, self.per_step, t.seed, e)  # (steps, world, per_step)
        self.epoch_plan = (imbalance(self.costs, plan), step_imbalance(self.costs, plan))
        if self.batches:
            self.batches.close()
        mine = [self.train_idx[s] for s in plan[k:, ctx.rank].reshape(-1, self.micro)]
        self.batches = Batches(self.task.batch, mine, t.prefetch_batches)
        self.batches_iter = iter(self.batches)
        self.clock.background = self.batches.thread_cpu_s
        if ctx.is_main:
            log.info("epoch %d: imbalance %.4f (per step %.4f) of assigned cost over %d rank(s)",
                     e, *self.epoch_plan, ctx.world)

    def train_step(self) -> dict:
        """One optimizer step over ``grad_accum`` micro-batches; its metrics row (every rank's timed work in it)."""
        ctx, t, clock, loss_parts = self.ctx, self.cfg.train, self.clock, self.workload.loss_parts
        self._batches_for(self.step)
        t0 = time.perf_counter()
        # The loss, then its logged parts, summed on the device: no host synchronisation per micro-step (on a GPU
        # each `float()` would wait for the queued kernels); one transfer per step, with the all-reduce.
        sums = torch.zeros(1 + len(loss_parts), dtype=torch.float64, device=ctx.device)
        # Clipping each rank's gradient before the all-reduce: no backward synchronises, one all-reduce after them.
        local_clip = t.clip_local_grad_norm if self.health is not None else 0.0
        for a in range(t.grad_accum):
            synchronising = a == t.grad_accum - 1 and not local_clip
            with clock.host():
                batch = tuple(x.to(ctx.device, non_blocking=True) for x in next(self.batches_iter))
            clock.add(self.batches.take_build_s())
            with D.no_sync(self.ddp, synchronising), D.autocast(self.precision, ctx.device):
                with clock.device():
                    out = self.task.loss(self.ddp, batch, train=True)
                    faults.delay("train.forward", ctx.rank)
                # The synchronising backward holds the wait for the slowest rank: not this rank's own work.
                with contextlib.nullcontext() if synchronising else clock.device():
                    gain = faults.gain("train.loss", ctx.rank)  # 1 but where a test makes a rank's gradients explode
                    self.scaler.scale(out.total * gain / t.grad_accum).backward()
            parts = (out.total, *(out.parts[p] for p in loss_parts))
            sums += torch.stack([v.detach().to(torch.float64) for v in parts]) / t.grad_accum
        if local_clip:  # in the gradients' scale: fp16's GradScaler has not unscaled them yet
            D.clip_then_average(self.model, ctx, local_clip * (self.scaler.get_scale() if self.scaler.is_enabled()
                                                               else 1.0), self.health)
        grad_norm, skipped = optimizer_step(self.scaler, self.opt, self.model.parameters(), t.clip_grad_norm)
        lr = self.sched.get_last_lr()[0]
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        loss, *part_means = D.all_mean(ctx, sums)  # reads back: this step's device work is done
        return metric_row(self.step, epoch=self.epoch, loss=loss, lr=lr, grad_norm=grad_norm, skipped_step=skipped,
                          parts=dict(zip(loss_parts, part_means, strict=True)),
                          samples_per_s=t.batch_size / (time.perf_counter() - t0),
                          imbalance=self.epoch_plan[0], step_imbalance=self.epoch_plan[1],
                          rank_busy_s=D.gather_floats(ctx, clock.take()))

    def check_health(self, row: dict) -> bool:
        """Every ``health_every`` steps: the ranks' local gradient norms, and whether one was flagged."""
        ctx, t, health = self.ctx, self.cfg.train, self.health
        flagged = []
        if health is not None and self.step % t.health_every == 0:
            norms = D.gather_floats(ctx, health.local_norm())
            flagged = D.flag_ranks(norms, t.health_k)
            row.update(rank_norm_min=min(norms), rank_norm_max=max(norms), flagged_ranks=",".join(map(str, flagged)))
            if flagged and ctx.is_main:
                log.warning("step %d: rank(s) %s have local gradient norms %s, > %.1f× the others' median",
                            self.step, flagged, [round(n, 4) for n in norms], t.health_k)
        if health is not None:
            health.reset()
        return bool(flagged)

    def train(self) -> None:
        """Step until the configured count: validate every ``eval_every`` steps, checkpoint every
        ``checkpoint_every``, collect garbage every ``GC_EVERY`` (outside the timed spans)."""
        ctx, t = self.ctx, self.cfg.train
        if not self.rows:  # step 0: the untrained model's validation loss, the yardstick of gate 2
            self.rows.append(metric_row(0, epoch=0, val_loss=self.validate()))
        if ctx.is_main and not self.resumed_from:
            log.info("initial validation loss %.5f", self.rows[0]["val_loss"])
        self.flagged_steps = sum(1 for r in self.rows if r["flagged_ranks"])
        last_val_step, last = next(((r["step"], r["val_loss"]) for r in reversed(self.rows)
                                    if math.isfinite(r["val_loss"])), (0, float("nan")))
        last_val = f"val {last:.5f}"
        # Python's collector would run whenever allocations pass its threshold: a full collection (100 ms and more
        # in a process holding torch, pyarrow and the workload) landing inside one rank's timed span reads as that
        # rank being slow, and on a step of a millisecond it is all gate 2 sees. So it runs on every rank at the
        # same steps, outside the spans (torchtitan's GarbageCollection does the same).
        collecting = gc.isenabled()
        gc.disable()
        try:
            while self.step < t.steps:
                row = self.train_step()
                self.flagged_steps += self.check_health(row)
                step, loss = self.step, row["loss"]
                if step % t.eval_every == 0 or step == t.steps:
                    row["val_loss"] = self.validate()
                    last_val = f"val {row['val_loss']:.5f}"
                self.rows.append(row)
                if ctx.is_main and (step % max(1, t.steps // 20) == 0 or step == t.steps):
                    # Validation runs every eval_every steps: between runs, the latest figure and its step.
                    shown = last_val if math.isfinite(row["val_loss"]) else f"{last_val} (step {last_val_step})"
                    log.info("step %d/%d  loss %.5f  %s  lr %.2e  |g| %.3f  %.0f samples/s",
                             step, t.steps, loss, shown, row["lr"], row["grad_norm"], row["samples_per_s"])
                if math.isfinite(row["val_loss"]):
                    last_val_step = step
                if step % GC_EVERY == 0:
                    gc.collect(1)
                if not math.isfinite(loss):
                    raise FloatingPointError(f"training loss became {loss} at step {step}; last checkpoint kept")
                if step % t.checkpoint_every == 0 or step == t.steps:
                    self.checkpoint()
        finally:
            if collecting:
                gc.enable()
            if self.batches:
                self.batches.close()
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
            gc.collect()

    def finish(self) -> dict:
        """Rank 0: the final weights, metrics, model card and summary."""
        return write_final(self.lake, self.prefix, model=self.model, task=self.task, workload=self.workload,
                           cfg=self.cfg, rows=self.rows, index=self.index, run_id=self.run_id, date=self.date,
                           world=self.ctx.world, precision=self.precision, resumed_from=self.resumed_from,
                           initial_val=self.rows[0]["val_loss"], flagged_steps=self.flagged_steps,
                           start=self.start_record, review_labels=self.feedback,
                           seconds=time.perf_counter() - self.started)
