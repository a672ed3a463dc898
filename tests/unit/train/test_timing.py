"""Measured per-rank work: the clock, the imbalance figure and its confidence bounds, and gate 2 reading them."""

import math

import numpy as np
import pytest
import torch

from aigc.config import TrainingGateThresholds
from aigc.lake import open_lake
from aigc.quality.gate import GateFailed
from aigc.quality.training import validate_training
from aigc.train.artifacts import metric_row
from aigc.train.timing import BusyClock, busy_matrix, measured_imbalance
from tests.unit.train.test_gate_skipped_steps import DATE, MODEL, RUN, finished_run


def test_the_clock_sums_its_spans_and_starts_again_after_each_take():
    ticks = iter(range(100))
    clock = BusyClock(torch.device("cpu"), cpu_clock=lambda: float(next(ticks)))
    with clock.host():
        pass
    with clock.device():
        pass
    assert clock.take() == 2.0 and clock.take() == 0.0
    with pytest.raises(ZeroDivisionError), clock.device():
        raise ZeroDivisionError
    assert clock.take() == 1.0  # a span that raised still counts its time


def test_the_clock_reads_cpu_time_not_the_wall():
    """A rank descheduled (here: asleep) is not working; a rank computing is."""
    import time

    clock = BusyClock(torch.device("cpu"))
    with clock.device():
        time.sleep(0.05)
    asleep = clock.take()
    with clock.device():
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
    assert asleep < 0.005 and clock.take() > 0.015  # the loop gets at least 30% of a core, even here


def steps_of(seed: int, n: int, world: int, slow: float, jitter: float) -> np.ndarray:
    """Per-step busy seconds: step costs that vary (long-tailed), each rank's own noise, rank 1 `slow` × slower."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(np.log(0.02), 0.5, size=(n, 1))
    busy = base * rng.lognormal(0, jitter, size=(n, world))
    busy[:, 1] *= 1 + slow
    return busy


@pytest.mark.parametrize("world", [2, 4])
def test_balanced_ranks_on_a_noisy_host_do_not_fail_by_chance_and_a_slow_rank_does(world):
    """Over 200 seeds of 40 steps whose costs vary 50%: ranks with 10% per-step timing noise of their own never
    reach a lower bound above 5%; a rank 30% slower than the others (13% over the mean of 2 ranks, 21% of 4) is
    caught in every seed, and the interval holds the true figure about as often as it says."""
    true = (1.3 / ((world - 1 + 1.3) / world)) - 1
    balanced = [measured_imbalance(steps_of(s, 40, world, 0.0, 0.1)) for s in range(200)]
    slow = [measured_imbalance(steps_of(s, 40, world, 0.3, 0.1)) for s in range(200)]
    assert max(r["imbalance_low"] for r in balanced) <= 0.05
    assert min(r["imbalance_low"] for r in slow) > 0.05 and {r["slowest_rank"] for r in slow} == {1}
    covered = np.mean([r["imbalance_low"] <= true <= r["imbalance_high"] for r in slow])
    assert covered >= 0.85  # two one-sided 95% bounds: a 90% interval, give or take the delta method
    # Waiting per step includes the noise; the run's figure does not.
    assert all(r["waste"] >= r["imbalance"] - 1e-12 for r in slow)


def test_one_rank_or_no_steps_reads_zero():
    assert measured_imbalance(np.ones((5, 1)))["imbalance_low"] == 0.0
    assert measured_imbalance(np.empty((0, 2)))["steps"] == 0


def test_the_matrix_leaves_out_the_warm_up_step_and_steps_of_another_world_size():
    m = busy_matrix([1, 2, 3, 4], [[9.0, 9.0], [1.0, 2.0], [1.0, 2.0, 3.0], [3.0, 4.0]], world=2)
    assert m.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def rows_with_busy(rank1_factor: float, n: int = 30) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = [metric_row(0, val_loss=0.1)]
    for step in range(1, n + 1):
        busy = [0.02 * rng.lognormal(0, 0.05), 0.02 * rank1_factor * rng.lognormal(0, 0.05)]
        rows.append(metric_row(step, loss=0.05, lr=1e-3, grad_norm=1.0, imbalance=0.0, rank_busy_s=busy,
                               val_loss=0.01 if step == n else math.nan))
    return rows


def test_gate_2_fails_a_run_whose_rank_1_was_slow_and_names_it(tmp_path):
    lake = open_lake(str(tmp_path / "balanced"))
    finished_run(lake, rows_with_busy(1.0))
    assert validate_training(lake, MODEL, DATE, RUN, TrainingGateThresholds())["success"]
    lake = open_lake(str(tmp_path / "slow"))
    finished_run(lake, rows_with_busy(1.3))
    with pytest.raises(GateFailed, match=r"rank 1 worked 1\d\.\d% longer than the ranks' mean over 29 steps"):
        validate_training(lake, MODEL, DATE, RUN, TrainingGateThresholds())
    assert validate_training(lake, MODEL, DATE, RUN, TrainingGateThresholds(max_imbalance=0.5))["success"]
