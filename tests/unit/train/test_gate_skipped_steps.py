"""Gate 2 and fp16: a step the GradScaler skipped (its gradients overflowed) is the scaler at work, not a failure."""

import math

import pytest

from aigc.config import TrainingGateThresholds
from aigc.lake import open_lake
from aigc.lake.keys import join
from aigc.quality.gate import GateFailed
from aigc.quality.training import validate_training
from aigc.train.artifacts import MODEL_CARD, SUMMARY, WEIGHTS, metric_row, training_run_prefix, write_metrics

DATE, MODEL, RUN = "2026-11-28", "shapes-cvae", "r1"


def finished_run(lake, rows: list[dict]) -> None:
    prefix = training_run_prefix(MODEL, DATE, RUN)
    write_metrics(lake, prefix, rows)
    lake.put_json(join(prefix, SUMMARY), {"steps": len(rows) - 1})
    lake.put_bytes(join(prefix, WEIGHTS), b"weights")
    lake.put_json(join(prefix, MODEL_CARD), {})


def steps(overflow_skipped: bool) -> list[dict]:
    rows = [metric_row(0, val_loss=0.1)]
    for step in range(1, 5):
        overflow = step == 2
        rows.append(metric_row(step, loss=0.05, lr=1e-3, grad_norm=math.inf if overflow else 1.0, imbalance=0.0,
                               skipped_step=int(overflow and overflow_skipped),
                               val_loss=0.01 if step == 4 else math.nan))
    return rows


def test_a_step_the_scaler_skipped_passes_gate_2_and_an_unskipped_infinite_norm_does_not(tmp_path):
    thresholds = TrainingGateThresholds()
    lake = open_lake(str(tmp_path / "skipped"))
    finished_run(lake, steps(overflow_skipped=True))
    assert validate_training(lake, MODEL, DATE, RUN, thresholds)["success"]
    lake = open_lake(str(tmp_path / "diverged"))
    finished_run(lake, steps(overflow_skipped=False))
    with pytest.raises(GateFailed, match="grad_finite"):
        validate_training(lake, MODEL, DATE, RUN, thresholds)


def test_a_run_that_skipped_most_of_its_steps_fails_gate_2(tmp_path):
    """Skips are excused one by one, not without limit: a run whose updates the scaler mostly skipped has not
    trained, whatever its finite losses say."""
    rows = [metric_row(0, val_loss=0.1)]
    rows += [metric_row(step, loss=0.05, lr=1e-3, grad_norm=math.inf, imbalance=0.0, skipped_step=1)
             for step in range(1, 4)]
    rows.append(metric_row(4, loss=0.05, lr=1e-3, grad_norm=1.0, imbalance=0.0, val_loss=0.01))
    lake = open_lake(str(tmp_path))
    finished_run(lake, rows)
    with pytest.raises(GateFailed, match="the fp16 scaler skipped more than 50% of the steps"):
        validate_training(lake, MODEL, DATE, RUN, TrainingGateThresholds())
    assert validate_training(lake, MODEL, DATE, RUN, TrainingGateThresholds(max_skipped_fraction=0.75))["success"]


def test_the_loop_marks_the_step_the_scaler_skipped_and_only_that_one():
    """The real GradScaler (its CPU build: the logic is the device's): an overflowing step changes no weight and
    lowers the scale, and is marked; the next, finite step trains and is not."""
    import torch

    from aigc.train.loop import optimizer_step

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    before = model.weight.detach().clone()
    scaler.scale(model(torch.ones(1, 3)).sum()).backward()
    model.weight.grad[0, 0] = math.inf  # an fp16 overflow
    norm, skipped = optimizer_step(scaler, opt, model.parameters(), clip=1.0)
    assert (math.isinf(norm), skipped) == (True, 1) and torch.equal(model.weight, before)
    assert scaler.get_scale() < 2.0**10
    opt.zero_grad()
    scaler.scale(model(torch.ones(1, 3)).sum()).backward()
    norm, skipped = optimizer_step(scaler, opt, model.parameters(), clip=1.0)
    assert math.isfinite(norm) and skipped == 0 and not torch.equal(model.weight, before)
    disabled = torch.amp.GradScaler("cpu", enabled=False)  # fp32 and bf16: never a skipped step
    model(torch.ones(1, 3)).sum().backward()
    assert optimizer_step(disabled, opt, model.parameters(), clip=1.0)[1] == 0
