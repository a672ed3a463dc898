"""bench/hf_diffusion_bench.py: the workload's batcher and diffusers' own pipeline call draw the same images from the
same prompts and seeds, and the results file holds every policy's rate with its range and the comparison with the
best fixed batch."""

from __future__ import annotations

import json
import sys

from bench import hf_diffusion_bench


def test_the_bench_compares_every_fixed_batch_and_ours_on_the_same_images(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_diffusion_bench, "RESULTS", tmp_path / "hf_diffusion.json")
    monkeypatch.setattr(sys, "argv", ["hf_diffusion_bench", "--repeats", "2", "--prompts", "6", "--steps", "2"])
    hf_diffusion_bench.main()
    d = json.loads((tmp_path / "hf_diffusion.json").read_text())
    fixed = {"pipeline_b1", "pipeline_b2", "pipeline_b4"}  # the sweep's sizes up to the prompts
    assert {r["policy"] for r in d["rows"]} == {"ours", "ours_judge2", "ours_warm", *fixed}
    # every policy's images within a grey level of the pipeline's one at a time: batches change no image
    assert all(r["agreement_with_b1"] == 1.0 and r["repeats"] == 2 and r["range"][0] <= r["images_per_s"]
               <= r["range"][1] for r in d["rows"])
    (summary,) = d["summary"]
    assert summary["best_fixed"].startswith("pipeline_b") and summary["ours_vs_best_fixed"] > 0
    assert summary["ours_judge2_vs_best_fixed"] > 0 and summary["ours_warm_vs_best_fixed"] > 0
    assert summary["learned_before"] and all(v >= 1 for v in summary["learned_before"].values())
    assert d["scheduler"] == "DDPMScheduler" and d["steps"] == 2 and d["provenance"]["host"]
    paired = summary["ours_vs_best_fixed_paired"]
    assert paired["range"][0] <= paired["median"] <= paired["range"][1] and paired["repeats"] == 2
