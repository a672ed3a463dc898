"""What a training run leaves in the lake, under ``training/<model>/dt=<date>/run=<id>/``.

    checkpoints/        step-NNNNNNN.pt + LATEST.json (see checkpoint.py)
    metrics.parquet     one row per optimizer step (row 0: the untrained validation loss)
    loss.png            training and validation loss curves
    model.safetensors   final weights (safetensors: loading runs no code)
    model.json          model config, vocabulary, lineage (curated partitions and their manifests)
    _SUMMARY.json       the run's summary, written last: the run is complete once it exists
    gpu-node-R.json     what node R's GPUs did during the run, or why nothing was sampled (aigc.telemetry)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import torch
from safetensors.torch import save as save_safetensors

from aigc.config import PipelineConfig
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.plots import line_chart
from aigc.registry.variants import unshared
from aigc.train.timing import busy_matrix, measured_imbalance

SUMMARY = "_SUMMARY.json"
WEIGHTS = "model.safetensors"
MODEL_CARD = "model.json"
METRICS = "metrics.parquet"

_NAN = float("nan")
METRIC_DEFAULTS: dict[str, float | int | str] = {
    "step": 0, "epoch": 0, "loss": _NAN, "lr": _NAN, "grad_norm": _NAN,
    "samples_per_s": _NAN, "imbalance": _NAN, "step_imbalance": _NAN, "val_loss": _NAN,
    "rank_norm_min": _NAN, "rank_norm_max": _NAN, "flagged_ranks": "", "skipped_step": 0, "rank_busy_s": [],
}
"""The columns of every workload's metrics; the workload's loss parts (``Workload.loss_parts``) follow ``loss``."""


def metrics_schema(parts: tuple[str, ...] | list[str] = ()) -> pa.Schema:
    names = [*list(METRIC_DEFAULTS)[:3], *parts, *list(METRIC_DEFAULTS)[3:]]
    types = {"step": pa.int64(), "epoch": pa.int64(), "skipped_step": pa.int64(), "flagged_ranks": pa.string(),
             "rank_busy_s": pa.list_(pa.float64())}  # each rank's measured work in the step (timing.py)
    return pa.schema([(k, types.get(k, pa.float64())) for k in names])


def metric_row(step: int, parts: dict[str, float] | None = None, **values) -> dict:
    """One step's metrics: the core's (``METRIC_DEFAULTS``) and the workload's loss ``parts``."""
    unknown = set(values) - set(METRIC_DEFAULTS)
    if unknown:
        raise KeyError(f"unknown metric(s) {sorted(unknown)}")
    clash = set(parts or ()) & set(METRIC_DEFAULTS)
    if clash:
        raise KeyError(f"loss part(s) {sorted(clash)} clash with the core's metrics")
    return {**METRIC_DEFAULTS, "step": step, **values, **(parts or {})}


def training_run_prefix(model: str, date: str | dt.date, run_id: str) -> str:
    return run_prefix(partition("training", model, date), run_id)


def write_metrics(lake: Lake, prefix: str, rows: list[dict], parts: tuple[str, ...] = (),
                  title: str = "training loss") -> str:
    """metrics.parquet (a part a row lacks, as step 0's validation row does, is NaN) and loss.png."""
    schema = metrics_schema(parts)
    # Defaults first: rows a checkpoint kept from before a metric existed get its default, not a null.
    table = pa.Table.from_pylist([{**METRIC_DEFAULTS, **dict.fromkeys(parts, _NAN), **r} for r in rows], schema=schema)
    with lake.parquet_writer(join(prefix, METRICS), schema) as writer:
        writer.write_table(table)
    train = [r for r in rows if r["step"] > 0]
    val = [r for r in rows if math.isfinite(r["val_loss"])]
    lake.put_bytes(join(prefix, "loss.png"), line_chart(
        {"train loss": ([r["step"] for r in train], [r["loss"] for r in train]),
         "validation loss": ([r["step"] for r in val], [r["val_loss"] for r in val])},
        title=title, xlabel="optimizer step", ylabel="loss", log_y=True))
    return join(prefix, METRICS)


def code_version() -> str:
    """The git commit of the code that trained, when it runs from a checkout; else the package version."""
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"aigc=={version('aigc')}"
        except PackageNotFoundError:
            return "unknown"


def write_final(lake: Lake, prefix: str, *, model: torch.nn.Module, task, workload, cfg: PipelineConfig,
                rows: list[dict], index, run_id: str, date: dt.date, world: int, precision: str,
                resumed_from: int | None, initial_val: float, flagged_steps: int, seconds: float,
                start: dict | None = None, review_labels: dict | None = None) -> dict:
    """Weights, model card, metrics and the summary (last). Returns the summary."""
    # One metadata entry: safetensors writes a map's entries in no fixed order, so two would make the same weights
    # hash differently from one save to the next (and registration is idempotent by that hash).
    weights = save_safetensors(unshared(task.weights(model)), metadata={"format": "pt"})
    lake.put_bytes(join(prefix, WEIGHTS), weights)
    metrics_key = write_metrics(lake, prefix, rows, workload.loss_parts, workload.loss_title)
    trained = [r for r in rows if r["step"] > 0]
    final_val = rows[-1]["val_loss"]
    speeds = sorted(r["samples_per_s"] for r in trained)
    start = start or {"version": None, "weights_sha256": None, "reason": "", "val_loss": None}
    lineage = {"dataset": cfg.prepare.dataset, "curated": index.partitions, "training_run": run_id,
               "start": start, "code_version": code_version(), "host": os.uname().nodename,
               "review_labels": review_labels}
    extra = task.files()
    for name, data in sorted(extra.items()):
        if "/" in name or name.startswith(".") or name in (WEIGHTS, MODEL_CARD, SUMMARY):
            raise ValueError(f"{type(task).__name__}.files(): {name!r} is not a plain file name of its own")
        lake.put_bytes(join(prefix, name), data)
    card = {"workload": workload.name, **task.card(),
            "loader_files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(extra.items())},
            "train": dataclasses.asdict(cfg.train), "weights": WEIGHTS,
            "weights_sha256": hashlib.sha256(weights).hexdigest(), "lineage": lineage,
            "parameters": sum(p.numel() for p in model.parameters())}
    lake.put_json(join(prefix, MODEL_CARD), card)
    summary = {
        "stage": "train", "date": date.isoformat(), "run_id": run_id, "model": cfg.model.name,
        "workload": workload.name,
        "run_uri": lake.url(prefix), "weights_uri": lake.url(join(prefix, WEIGHTS)),
        "metrics_uri": lake.url(metrics_key), "loss_png_uri": lake.url(join(prefix, "loss.png")),
        "steps": trained[-1]["step"] if trained else 0, "optimizer_steps_logged": len(trained),
        "world_size": world, "precision": precision, "resumed_from_step": resumed_from,
        "initial_val_loss": initial_val, "final_val_loss": final_val, "start": start,
        "final_train_loss": trained[-1]["loss"] if trained else None,
        "imbalance": max((r["imbalance"] for r in trained), default=0.0),
        "measured_imbalance": measured_imbalance(busy_matrix([r["step"] for r in trained],
                                                             [r["rank_busy_s"] for r in trained], world)),
        "flagged_steps": flagged_steps, "samples": len(index), "partitions": len(index.partitions),
        "review_labels": review_labels,
        "median_samples_per_s": speeds[len(speeds) // 2] if speeds else None,
        **task.stats(), "parameters": card["parameters"],
        "weights_sha256": card["weights_sha256"], "seconds": round(seconds, 2),
    }
    lake.put_json(join(prefix, SUMMARY), json.loads(json.dumps(summary, default=str)))
    return summary
