"""B8's arithmetic and its probe: gradient-norm spikes, the recommendation by the evaluation stage's rule, the
table's rows, and one real probe of a training step on the CPU."""

from __future__ import annotations

import json
import subprocess

import pytest

from aigc.config import preset
from aigc.workloads.image import IMAGE
from tests.unit.bench.conftest import ROOT, bench_command


def test_a_norm_over_five_times_the_recent_median_is_a_spike_and_scaler_skips_are_counted_apart(bench_module):
    bench = bench_module("precision_bench")
    norms = [1.0] * 60 + [6.0] + [1.0] * 10 + [float("inf"), 4.0]
    skipped = [0] * 71 + [1, 0]
    out = bench.grad_spikes(norms, skipped)
    assert out["spikes"] == 1 and out["worst_ratio"] == 6.0 and out["skipped_steps"] == 1
    # Before the window fills there is no median to compare with: an early large norm is warm-up, not a spike.
    assert bench.grad_spikes([50.0] + [1.0] * 10, [0] * 11)["spikes"] == 0


def _probe(ms: float) -> dict:
    return {"samples_per_s": 1000 / ms, "ms_per_sample_rounds": [ms, ms * 1.01, ms * 0.99], "peak_mib": 500.0}


def _trained(hits: int, n: int = 648) -> dict:
    verdicts = [True] * hits + [False] * (n - hits)
    return {"alignment": hits / n, "alignment_ci": {"lo": 0, "hi": 1}, "final_val_loss": 0.01, "verdicts": verdicts}


def test_the_cheapest_configuration_as_good_as_the_best_is_recommended_as_an_override_that_applies(bench_module):
    bench = bench_module("precision_bench")
    probes = {"32/fp32": _probe(5.0), "32/bf16": _probe(3.5), "64/fp32": _probe(16.0), "64/bf16": _probe(11.0)}
    # 64 px learns the task better: the 32 px runs are far below, so the cheaper of the 64 px ones wins (2 prompts
    # in 648 apart: the upper end of its loss is below epsilon).
    trained = {"32/fp32": _trained(200), "32/bf16": _trained(190), "64/fp32": _trained(540), "64/bf16": _trained(538)}
    rec = bench.recommendation(probes, trained, epsilon=0.02, confidence=0.95, tolerance=0.25)
    assert rec["recommended"] == "64/bf16" and rec["cli"] == "aigc train --resolution 64 --precision bf16"
    cfg = preset("demo", IMAGE).override(rec["apply"])
    assert (cfg.workload.settings.resolution, cfg.train.precision) == (64, "bf16")
    assert set(rec["front"]) <= set(trained) and "64/bf16" in rec["front"]
    # Equal quality everywhere: the fastest in every probe round wins.
    even = {c: _trained(450) for c in trained}
    assert bench.recommendation(probes, even, epsilon=0.02, confidence=0.95, tolerance=0.25)["recommended"] == "32/bf16"


def test_the_table_has_a_row_per_configuration_and_the_recommendation(bench_module):
    summary = bench_module("summary")
    probe = {"samples_per_s": 200.0, "min_max": [190.0, 210.0], "runs": 3, "peak_mib": 450.0,
             "peak_above_held_mib": 30.0, "device": "cpu"}
    trained = {"alignment": 0.85, "alignment_ci": {"lo": 0.78, "hi": 0.9}, "final_val_loss": 0.01,
               "grad": {"spikes": 0, "skipped_steps": 0}}
    d = {"steps": 300, "global_batch": 64, "probe": {"32/fp32": probe, "32/fp16": probe},
         "trained": {"32/fp32": trained}, "not_trained": {"32/fp16": "TrainConfig.precision=fp16 needs CUDA"},
         "recommended": "32/fp32",
         "apply": {"workload": {"settings": {"resolution": 32}}, "train": {"precision": "fp32"}},
         "front": ["32/fp32"]}
    rows = summary.precision_rows(d)
    assert len(rows) == 3 and "not trained" in rows[1][4] and rows[-1][-1] == "met"
    old = {**d, "apply": {"model": {"resolution": 32}}}  # a file written before the image settings moved
    assert "32/fp32 (aigc train --resolution 32 --precision fp32)" in summary.precision_rows(old)[-1][4]
    assert "fp16 not run" not in rows[-1][1]
    # make bench leaves fp16 out on a CPU: the recommendation says so, rather than a row going missing unexplained
    cpu_only = {**d, "device": "cpu", "probe": {"32/fp32": probe}, "not_trained": {}}
    rows = summary.precision_rows(cpu_only)
    assert len(rows) == 2 and "fp16 not run on a CPU, where it cannot train" in rows[-1][1]
    times = {"seconds": {"a": 60.0}, "total_s": 1600.0, "measured": "2026-12-04", "missing": [], "goal_s": 1500}
    assert summary.bench_time_rows({"standard": times})[0][-1] == "MISSED"
    assert summary.bench_time_rows({"standard": {**times, "total_s": 1400.0}})[0][-1] == "met"
    assert "not measured" in summary.bench_time_rows({"standard": {**times, "missing": ["b.py"]}})[0][4]
    full = summary.bench_time_rows({"full": {**times, "goal_s": None}})  # no goal for the long profile
    assert full[0][0] == "make bench-full" and full[0][-1] == "n/a"
    md = summary.script_times_md({"standard": times, "full": {"seconds": {"a": 120.0, "b": 30.0}, "total_s": 150.0,
                                                              "host": "h1", "measured": "2026-12-03T01"}})
    assert "make bench-full: h1, 2026-12-03" in md[1] and "| a | 1.0 | 2.0 |" in md and "| b |  | 0.5 |" in md
    assert md[-1] == "| **total** | **26.7** | **2.5** |"


@pytest.mark.timeout(120)
def test_the_probe_times_real_training_steps_and_reads_the_memory_they_peak_at():
    out = subprocess.run(bench_command("precision_bench", "--probe", "32/fp32", "--probe-steps", "2",
                                       "--probe-max-s", "1"), capture_output=True, text=True, check=True, cwd=ROOT)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["steps"] == 2 and m["samples_per_s"] > 0
    # A 32-image step holds its activations and gradients (megabytes) above what stays between steps.
    assert m["peak_above_held_bytes"] > 1 << 20 and m["peak_bytes"] > m["peak_above_held_bytes"]


def test_the_table_reads_batching_results_as_the_bench_writes_them(bench_module):
    # batching_bench.py writes its repeats once for the file; rows merged from several commands carry their own.
    summary = bench_module("summary")
    row = {"workload": "image", "items": 1000, "budget_bytes": None, "oracle": "fixed_32", "ours_vs_oracle": 0.9,
           "oom_rate": 0.0}
    assert summary.batching_rows({"repeats": 3, "rows": [row]})[0][3] == 3
    assert summary.batching_rows({"rows": [{**row, "repeats": 5}]})[0][3] == 5


def test_a_generated_block_is_replaced_whole_and_text_without_one_is_left_alone(bench_module, monkeypatch):
    summary = bench_module("summary")
    monkeypatch.setitem(summary.BLOCKS, "make-test", lambda: "| new |")
    text = "intro\n<!-- generated: make-test -->\nold table\n<!-- end of generated -->\noutro\n"
    once = summary.regenerate(text)
    assert once == "intro\n<!-- generated: make-test -->\n| new |\n<!-- end of generated -->\noutro\n"
    assert summary.regenerate(once) == once
    assert summary.regenerate("no markers here\n") == "no markers here\n"
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        summary.regenerate("<!-- generated: nope -->\n<!-- end of generated -->")


def test_fp16_without_cuda_and_a_precision_far_slower_than_its_resolution_twin_are_not_trained(bench_module):
    bench = bench_module("precision_bench")
    probes = {"32/fp32": {"samples_per_s": 150.0}, "32/bf16": {"samples_per_s": 15.0},
              "32/fp16": {"samples_per_s": 20.0}, "64/fp32": {"samples_per_s": 35.0},
              "64/bf16": {"samples_per_s": 30.0}}
    out = bench.untrainable(probes, "cpu", 4.0)
    assert set(out) == {"32/bf16", "32/fp16"}  # 64/bf16 is compared with 64/fp32, not with the faster 32 px
    assert "needs CUDA" in out["32/fp16"] and "10.0x slower than 32/fp32" in out["32/bf16"]
    # On CUDA fp16 trains, and counts as the twin the others are compared with.
    on_gpu = bench.untrainable({**probes, "32/fp16": {"samples_per_s": 900.0}}, "cuda", 4.0)
    assert set(on_gpu) == {"32/fp32", "32/bf16"}


def test_a_configuration_the_first_probe_round_rules_out_is_not_probed_again_and_is_not_trained(bench_module,
                                                                                                 monkeypatch):
    bench = bench_module("precision_bench")
    speed = {"32/fp32": 200.0, "32/bf16": 180.0, "64/fp32": 50.0, "64/bf16": 3.0, "64/fp16": 2.0}
    probed = []

    def run(argv, **_kw):
        configs = argv[argv.index("--probe") + 1].split(",")
        probed.extend(configs)
        lines = [json.dumps({"config": c, "device": "cpu", "steps": 2, "samples_per_s": speed[c],
                             "peak_bytes": 2 << 20, "peak_above_held_bytes": 1 << 20, "memory": "m"}) for c in configs]
        return subprocess.CompletedProcess(argv, 0, "\n".join(lines), "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    out = bench.run_probes(list(speed), "cpu", rounds=3, steps=2, max_s=1.0, max_slowdown=4.0)
    # 64/bf16 is 16.7x slower than 64/fp32, and fp16 cannot train without CUDA: one round each
    assert {c: probed.count(c) for c in speed} == {"32/fp32": 3, "32/bf16": 3, "64/fp32": 3, "64/bf16": 1,
                                                     "64/fp16": 1}
    assert "16.7x slower than 64/fp32" in out["64/bf16"]["screened"] and out["64/bf16"]["runs"] == 1
    assert "needs CUDA" in out["64/fp16"]["screened"] and "screened" not in out["32/bf16"]
    probed.clear()  # fp16 alone on a CPU: one round, then nothing is left to time
    assert bench.run_probes(["64/fp16"], "cpu", rounds=3, steps=2, max_s=1.0, max_slowdown=4.0)["64/fp16"]["runs"] == 1
    probed.clear()  # without the limit every configuration runs every round
    bench.run_probes(list(speed), "cpu", rounds=2, steps=2, max_s=1.0)
    assert len(probed) == 10
