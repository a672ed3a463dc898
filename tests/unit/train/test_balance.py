"""Cost-balanced shards: no rank straggles on a long-tailed dataset, where a row-count split does."""

import numpy as np
import pytest

from aigc.train.balance import balanced_plan, imbalance, naive_plan, step_imbalance
from aigc.workloads.image import sample_cost


def long_tailed_costs(n=8192, seed=0):
    """Pixels of a mixed-resolution drop (most 32², a tail up to 256²) plus caption tokens (1–60)."""
    rng = np.random.default_rng(seed)
    side = rng.choice([32, 64, 128, 256], size=n, p=[0.7, 0.2, 0.08, 0.02])
    tokens = np.minimum(1 + rng.pareto(1.5, size=n) * 6, 60).astype(int)
    return sample_cost(side * side, tokens)


@pytest.mark.parametrize("world, micro", [(2, 32), (4, 16), (8, 8)])
def test_balanced_split_keeps_imbalance_under_5_percent_where_the_naive_split_does_not(world, micro):
    costs = long_tailed_costs()
    balanced, naive = balanced_plan(costs, world, micro, seed=0, epoch=0), naive_plan(len(costs), world, micro, 0, 0)
    figures = {"balanced": (imbalance(costs, balanced), step_imbalance(costs, balanced)),
               "naive": (imbalance(costs, naive), step_imbalance(costs, naive))}
    print(f"\nworld={world} micro={micro}: imbalance (epoch, mean per step): "
          + "; ".join(f"{k} {e:.4f}, {s:.4f}" for k, (e, s) in figures.items()))
    assert figures["balanced"][0] <= 0.05 and figures["balanced"][1] <= 0.05
    assert figures["naive"][1] > 0.05  # per step, where the all-reduce waits, the row-count split straggles


def test_every_rank_gets_the_same_count_and_no_sample_twice():
    costs = long_tailed_costs(1000)
    plan = balanced_plan(costs, world=3, micro=7, seed=1, epoch=2)
    assert plan.shape == (1000 // 21, 3, 7)
    assert len(np.unique(plan)) == plan.size


def test_the_plan_is_a_function_of_seed_and_epoch():
    costs = long_tailed_costs(2000)
    a, b = balanced_plan(costs, 4, 8, 0, 0), balanced_plan(costs, 4, 8, 0, 0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, balanced_plan(costs, 4, 8, 0, 1))


def test_the_left_out_remainder_changes_with_the_epoch():
    costs = np.ones(100)
    left_out = [set(range(100)) - set(balanced_plan(costs, 2, 16, 0, e).ravel()) for e in range(5)]
    assert all(len(s) == 100 - 96 for s in left_out)
    assert len(set.union(*left_out)) > 4


def test_too_few_samples_give_an_empty_plan():
    assert balanced_plan(np.ones(10), 4, 4, 0, 0).shape == (0, 4, 4)


@pytest.mark.parametrize("split", ["balanced", "length_grouped", "shuffled", "round_robin", "contiguous"])
def test_every_split_gives_each_rank_the_same_count_and_no_sample_twice(split):
    from aigc.train.balance import plan_for

    costs = np.random.default_rng(0).lognormal(0, 1, 103)
    plan = plan_for(split, costs, 2, 5, seed=1, epoch=0)
    assert plan.shape == (10, 2, 5) and len(np.unique(plan)) == plan.size


def test_round_robin_and_contiguous_follow_the_stored_order():
    from aigc.train.balance import contiguous_plan, round_robin_plan

    assert round_robin_plan(8, 2, 2)[0].tolist() == [[0, 2], [1, 3]]
    assert contiguous_plan(8, 2, 2)[:, 1].tolist() == [[4, 5], [6, 7]]
