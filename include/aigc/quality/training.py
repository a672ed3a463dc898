"""Gate 2 (train → deploy): the expectations a training run's metrics must meet before hand-off.

The gate reads what the run stored (metrics.parquet and _SUMMARY.json), not what the trainer
said in memory: a model whose metrics are missing, non-finite or unimproved does not pass.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

import pandas as pd

from aigc.config import TrainingGateThresholds
from aigc.config.form import how_to_set
from aigc.evaluate.stats import outcome
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.lake.publish import publish
from aigc.quality.gate import Table, run_gate
from aigc.train.artifacts import METRICS, MODEL_CARD, SUMMARY, WEIGHTS, training_run_prefix
from aigc.train.timing import busy_matrix, measured_imbalance

GATE = "training"


def validate_training(lake: Lake, model: str, date: str | dt.date, run_id: str,
                      thresholds: TrainingGateThresholds,
                      extra: Callable[[dict], list[Table]] | None = None) -> dict:
    """Run gate 2 on a finished (not yet published) training run; GateFailed if it does not pass. ``extra``: the
    workload's own tables (``Workload.training_checks``) on the run's stored summary."""
    import great_expectations.expectations as gxe

    prefix = training_run_prefix(model, date, run_id)
    steps = lake.read_parquet([join(prefix, METRICS)]).to_pandas()
    # A step the fp16 GradScaler skipped (its gradients overflowed) has an infinite norm by design: not a failure.
    trained = steps[steps["step"] > 0].assign(
        loss_finite=lambda f: f["loss"].map(math.isfinite),
        grad_finite=lambda f: f["grad_norm"].map(math.isfinite) | (f["skipped_step"] == 1))
    val = steps[steps["val_loss"].map(math.isfinite)]
    initial = float(val["val_loss"].iloc[0]) if len(val) else math.nan
    final = float(val["val_loss"].iloc[-1]) if len(val) else math.nan
    stored = lake.get_json(join(prefix, SUMMARY))
    busy = list(trained["rank_busy_s"]) if "rank_busy_s" in trained else [None] * len(trained)
    world = int(stored.get("world_size") or max((len(b) for b in busy if b is not None), default=1))
    ranks = measured_imbalance(busy_matrix(list(trained["step"]), busy, world))
    summary = pd.DataFrame([{
        "initial_val_loss": initial, "final_val_loss": final,
        "val_ratio": final / initial if initial > 0 else math.inf,
        "rank_imbalance_high": ranks["imbalance_high"],
        "flagged_steps": int((trained["flagged_ranks"] != "").sum()),
        "skipped_fraction": float((trained["skipped_step"] == 1).mean()) if len(trained) else 0.0,
        "files_present": all(lake.exists(join(prefix, f)) for f in (WEIGHTS, MODEL_CARD, SUMMARY)),
    }])
    tables = [
        Table("steps", trained, [
            gxe.ExpectTableRowCountToEqual(value=int(stored["steps"])),
            gxe.ExpectColumnValuesToBeUnique(column="step"),
            gxe.ExpectColumnValuesToBeInSet(column="loss_finite", value_set=[True]),
            gxe.ExpectColumnValuesToBeInSet(column="grad_finite", value_set=[True]),
        ]),
        Table("summary", summary, [
            gxe.ExpectColumnValuesToBeBetween(column="final_val_loss", min_value=0,
                                              max_value=thresholds.max_final_val_loss),
            gxe.ExpectColumnValuesToBeBetween(column="val_ratio", max_value=thresholds.max_val_ratio),
            gxe.ExpectColumnValuesToBeBetween(column="rank_imbalance_high", max_value=thresholds.max_imbalance),
            gxe.ExpectColumnValuesToBeBetween(column="flagged_steps", max_value=thresholds.max_flagged_steps),
            gxe.ExpectColumnValuesToBeBetween(column="skipped_fraction", max_value=thresholds.max_skipped_fraction),
            gxe.ExpectColumnValuesToBeInSet(column="files_present", value_set=[True]),
        ], explain={
            "final_val_loss": f"the final validation loss {final:.5f} is above the maximum "
                              f"{thresholds.max_final_val_loss:g}: the model has not learnt the data well enough. "
                              f"Train longer ({how_to_set('train', 'steps')}), or raise the maximum with "
                              f"{how_to_set('train_gate', 'max_final_val_loss')}",
            "rank_imbalance_high": imbalance_failure(ranks, thresholds.max_imbalance),
            "skipped_fraction": f"the fp16 scaler skipped more than {thresholds.max_skipped_fraction:.0%} of the "
                                "steps (their gradients overflowed): the run barely updated its weights. Train "
                                f"in bf16 or fp32 ({how_to_set('train', 'precision')}), or lower the learning rate",
            "val_ratio": f"validation loss fell only to {final / initial if initial > 0 else math.inf:.3f}× its "
                         f"starting value, above the maximum {thresholds.max_val_ratio:g}×: training barely "
                         f"helped. Train longer ({how_to_set('train', 'steps')}) or check the learning rate",
        }),
        *(extra(stored) if extra else []),
    ]
    return run_gate(GATE, tables, lake, run_prefix(partition("quality", GATE, date), run_id))


def imbalance_outcome(ranks: dict, maximum: float) -> str:
    """Gate 2's balance check, on evidence (``aigc.evaluate.stats.outcome``): it passes only when the upper end of
    the slowest rank's one-sided 95 % interval (``aigc.train.timing.measured_imbalance``) is within ``maximum``, fails
    when the lower end is above it, and is undecided otherwise, which does not pass either: a run as unbalanced as
    the maximum passes with probability at most 5 %."""
    return outcome({"lo": ranks["imbalance_low"], "hi": ranks["imbalance_high"]}, maximum, at_least=False)


def imbalance_failure(ranks: dict, maximum: float) -> str:
    """Plain words for a balance check that did not pass: failed, or not enough evidence and how to get more."""
    figure = (f"rank {ranks['slowest_rank']} worked {ranks['imbalance']:.1%} longer than the ranks' mean over "
              f"{ranks['steps']} steps (95% bounds {ranks['imbalance_low']:.1%} to {ranks['imbalance_high']:.1%}, "
              f"{ranks['batches']} batches of steps)")
    raise_it = f"raise the maximum with {how_to_set('train_gate', 'max_imbalance')}"
    if imbalance_outcome(ranks, maximum) == "undecided":
        return (f"not enough evidence that the ranks are balanced: {figure}, an interval that reaches past the "
                f"maximum {maximum:.0%} on both sides. A longer run measures it more closely "
                f"({how_to_set('train', 'steps')}); or {raise_it}")
    return (f"{figure}, above the maximum {maximum:.0%}: the others waited for it at every all-reduce. Look for a "
            "slower or busier host or device, or a cost estimate (Workload.sample_costs) that does not track its "
            f"time; or {raise_it}")


def publish_trained(lake: Lake, model: str, date: str | dt.date, run_id: str) -> dict:
    """Hand the gated run to stage 3: ``training/<model>/dt=<date>/_PUBLISHED.json`` → the run."""
    pointer = publish(lake, partition("training", model, date), run_id, summary=SUMMARY)
    return {"stage": "publish-model", "model": model, "date": str(date), "run_id": run_id,
            "run_uri": lake.url(pointer["run_prefix"]), "replaced_run_id": pointer["previous_run_id"]}
