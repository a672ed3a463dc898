"""B3's screening: a baseline far off the goal and far behind the best baseline after one run is not repeated;
ours and the strongest baseline always are, and the table says which were screened."""

from __future__ import annotations

import pytest

# First-run waste by (world, split); later runs repeat it (the arithmetic, not the noise, is under test).
WASTE = {(2, "contiguous"): 0.38, (2, "round_robin"): 0.64, (2, "length_grouped"): 0.03, (2, "balanced"): 0.02,
         # at 4 ranks the strongest baseline itself is over 20 %: the best is never screened
         (4, "contiguous"): 0.92, (4, "round_robin"): 0.50, (4, "length_grouped"): 0.23, (4, "balanced"): 0.25}
SPLITS = ["contiguous", "round_robin", "length_grouped", "balanced"]


@pytest.fixture
def fake_runs(bench_module, monkeypatch):
    bench = bench_module("balance_bench")
    calls: list[tuple[int, str]] = []
    launches: list[int] = []
    monkeypatch.setattr(bench, "config", lambda steps, world, split, context: (world, split))

    def run_round(lake, world, cfgs):
        launches.append(world)
        calls.extend(cfgs)
        return [{"measured": {"waste": WASTE[c], "imbalance": WASTE[c]}, "samples_per_s": 10.0, "busy": [],
                 "steps": []} for c in cfgs]

    monkeypatch.setattr(bench, "run_round", run_round)
    return bench, calls, launches


def test_a_baseline_far_off_the_goal_and_the_best_runs_once_and_the_rest_every_repeat(fake_runs):
    bench, calls, launches = fake_runs
    table, runs = bench.measured(None, 6, 3, [2, 4], 4096, SPLITS)
    counts = {key: calls.count(key) for key in WASTE}
    assert counts == {(2, "contiguous"): 1, (2, "round_robin"): 1, (2, "length_grouped"): 3, (2, "balanced"): 3,
                      # 0.50 is over 20 % but under 3 x 0.23: near enough the best to be repeated
                      (4, "contiguous"): 1, (4, "round_robin"): 3, (4, "length_grouped"): 3, (4, "balanced"): 3}
    assert launches == [2, 4, 2, 4]  # one launch a world for the first repeat, one for the rest
    # the repeats alternate, each in its own order: the first run of the second launch is not always one split's
    assert calls[8:12] == [(2, "balanced"), (2, "length_grouped"), (2, "length_grouped"), (2, "balanced")]
    assert table["2 ranks, contiguous"]["screened"] and table["2 ranks, contiguous"]["runs"] == 1
    assert not table["4 ranks, balanced"]["screened"] and table["4 ranks, balanced"]["runs"] == 3
    assert not table["4 ranks, length_grouped"]["screened"]


def test_with_one_repeat_or_screening_off_nothing_is_marked_screened(fake_runs):
    bench, calls, _ = fake_runs
    table, _ = bench.measured(None, 6, 1, [2], 4096, SPLITS)
    assert not any(v["screened"] for v in table.values())
    calls.clear()
    table, _ = bench.measured(None, 6, 2, [2], 4096, SPLITS, screen=1.0)
    assert len(calls) == 8 and not any(v["screened"] for v in table.values())


def test_the_table_row_names_the_screened_baselines_and_compares_ours_with_the_best(fake_runs, bench_module):
    bench, _, _ = fake_runs
    table, _ = bench.measured(None, 6, 3, [2], 4096, SPLITS)
    sim = {"fit": {"r2": 0.9}}
    rows = bench_module("summary").balance_rows({"measured": table, "simulated": sim, "steps": 6})
    assert len(rows) == 1
    compares = rows[0][1]
    assert "ours vs length_grouped (best of 3; contiguous, round_robin screened out after one run)" in compares
    assert rows[0][3] == 3  # ours: every repeat
