"""bench/train_session.py: several training runs in one torchrun launch, a solo run among them."""

from __future__ import annotations

import pytest

from tests.training_fixtures import DATE, tiny_config


def test_one_launch_trains_every_run_and_a_solo_run_is_a_world_of_one(bench_module, curated_lake):
    session = bench_module("train_session")
    runs = [session.Run(tiny_config(nproc=1), solo=True), session.Run(tiny_config(nproc=2)),
            session.Run(tiny_config(nproc=2, grad_compression="fp16"))]
    summaries = session.launch(curated_lake, DATE, 2, runs, timeout_s=300)
    assert [s["run_id"] for s in summaries] == [r.run_id for r in runs]
    assert [s["world_size"] for s in summaries] == [1, 2, 2]
    assert all(s["steps"] == 12 and s["final_val_loss"] < s["initial_val_loss"] for s in summaries)


def test_a_run_of_another_world_is_refused_before_anything_starts(bench_module, curated_lake):
    session = bench_module("train_session")
    with pytest.raises(ValueError, match="every run's nproc must be 2"):
        session.launch(curated_lake, DATE, 2, [session.Run(tiny_config(nproc=4))])
