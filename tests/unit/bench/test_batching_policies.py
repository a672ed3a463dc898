"""B1's token-budget planner (a baseline the bench compares ours with) keeps to its budget and its order."""

from __future__ import annotations

from aigc.batching import MemoryModel
from aigc.batching.faults import SimulatedOOM
from tests.unit.batching.test_batching import WIDTH, long_tailed_lengths


def test_the_planner_never_exceeds_the_budget_in_a_simulated_accountant(bench_module):
    lengths = long_tailed_lengths()
    model = MemoryModel(width=WIDTH)
    budget = 4 * 64 * (WIDTH**2 + 64**2)
    policies = bench_module("batching_policies")
    batches = policies.plan_batches(lengths, model, budget, max_batch=128)
    accountant = SimulatedOOM(truth=model, capacity_bytes=budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        if len(batch) > 1:
            accountant.check([lengths[i] for i in batch])  # raises if a planned batch would not fit
    assert max(len(b) for b in batches) > 1 and not accountant.raised
    rows = policies.restore_order(batches, [[f"r{i}" for i in b] for b in batches])
    assert rows == [f"r{i}" for i in range(len(lengths))]


