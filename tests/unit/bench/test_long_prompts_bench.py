"""bench/long_prompts_bench.py on the hf-causal-lm workload's serving: 4,096-token prompts under a budget that a fixed
batch of 32 exceeds (the budget is five prompts' peak: six prompts overflow it), answered by the batcher with no
violation."""

from __future__ import annotations

import json
import sys

from bench import long_prompts_bench


def test_the_hf_decoder_answers_long_prompts_under_the_budget_with_no_violation(tmp_path, monkeypatch):
    monkeypatch.setattr(long_prompts_bench, "RESULTS", tmp_path / "long_prompts.json")
    monkeypatch.setattr(sys, "argv", ["long_prompts_bench", "--repeats", "1", "--prompts", "6",
                                      "--models", "hf-causal-lm"])
    long_prompts_bench.main()
    d = json.loads((tmp_path / "long_prompts_hf.json").read_text())
    (row,) = d["rows"]
    ours, fixed_32 = row["policies"]["ours"], row["policies"]["fixed_32"]
    assert d["model"] == "hf-causal-lm" and row["prompt_tokens"] == 4096
    assert ours["completed"] and ours["violations"] == 0  # completed: every prompt answered, the first as it is alone
    assert fixed_32["violations"] > 0 and not fixed_32["completed"]
