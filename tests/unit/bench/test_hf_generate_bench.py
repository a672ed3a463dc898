"""bench/hf_generate_bench.py: the workload's batcher and transformers' generate answer the same prompts alike, and
the results file holds every policy's rate with its range and the comparison with the best fixed batch."""

from __future__ import annotations

import json
import sys

from bench import hf_generate_bench


def test_the_bench_compares_every_fixed_batch_and_ours_on_the_same_greedy_outputs(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_generate_bench, "RESULTS", tmp_path / "hf_generate.json")
    monkeypatch.setattr(sys, "argv", ["hf_generate_bench", "--repeats", "2", "--prompts", "12", "--new-tokens", "4"])
    elsewhere = {"model": "m", "new_tokens": 4, "summary": [{"prompts": 12}], "rows": ["…"],
                 "provenance": {"host": "another host", "date": "2026-12-01", "commit": "abc"}}
    (tmp_path / "hf_generate.json").write_text(json.dumps({**elsewhere, "other_hosts": [
        {**elsewhere, "provenance": {**elsewhere["provenance"], "date": "2026-11-01"}}]}))
    hf_generate_bench.main()
    d = json.loads((tmp_path / "hf_generate.json").read_text())
    # the other host's latest run is kept, its summary without its rows
    assert d["other_hosts"] == [{k: v for k, v in elsewhere.items() if k != "rows"}]
    policies = {r["policy"] for r in d["rows"]}
    assert policies == {"ours", "ours_judge2", *(f"generate_b{k}" for k in (1, 4, 16, 64)),
                        *(f"generate_sorted_b{k}" for k in (1, 4, 8, 16, 32, 64, 128)),
                        *(f"pipeline_b{k}" for k in (4, 16, 64))}
    assert all(r["agreement_with_b1"] == 1.0 and r["repeats"] == 2 and r["range"][0] <= r["tokens_per_s"]
               <= r["range"][1] for r in d["rows"])
    (summary,) = d["summary"]
    assert summary["best_fixed"] in policies and not summary["best_fixed"].startswith("ours")
    assert summary["ours_vs_best_fixed"] > 0 and summary["ours_judge2_vs_best_fixed"] > 0 and d["provenance"]["host"]
    paired = summary["ours_vs_best_fixed_paired"]
    assert paired["range"][0] <= paired["median"] <= paired["range"][1] and paired["repeats"] == 2
    assert 0 <= paired["faster_in"] <= 2
