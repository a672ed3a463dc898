"""``make bench-gpu``: the GPU section's profile, where its results go, its table, and the two changes it made to
the scripts (B2's training loop on a chosen device, B8's probes grouped a round a process on CUDA).

No test here needs a GPU: what only a GPU shows was measured on one (docs/benchmarks.md, "The GPU section"); these
check the plumbing around it on the CPU, the B2 loop included (a real run, model on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit.bench.conftest import ROOT, bench_command


def test_no_cuda_stops_the_gpu_section_with_the_reason_and_runs_nothing(bench_module, monkeypatch, capsys):
    run_all = bench_module("run_all")
    monkeypatch.setattr(run_all, "cuda_devices", lambda: 0)
    monkeypatch.setattr(run_all.subprocess, "call", lambda argv, env=None, cwd=None: pytest.fail(f"ran {argv}"))
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--gpu"])
    with pytest.raises(SystemExit, match="no CUDA device here"):
        run_all.main()


def test_with_a_gpu_the_section_runs_its_scripts_with_their_cuda_flags_into_results_gpu(bench_module, tmp_path,
                                                                                        monkeypatch):
    run_all = bench_module("run_all")
    times = tmp_path / "bench_times.json"
    monkeypatch.setattr(run_all, "RESULTS", times)
    monkeypatch.setattr(run_all, "cuda_devices", lambda: 1)
    calls, envs = [], []

    def call(argv, env=None, cwd=None):
        calls.append(argv)
        envs.append((env or {}).get("AIGC_BENCH_RESULTS"))
        return 0

    monkeypatch.setattr(run_all.subprocess, "call", call)
    monkeypatch.setattr(run_all.subprocess, "check_call", lambda argv, cwd=None: calls.append(argv) or 0)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--gpu"])
    run_all.main()
    gpu = [b for b in run_all.SCRIPTS if b.gpu is not None]
    assert [c[2] for c in calls[:-1]] == [f"bench.{b.name}" for b in gpu]
    assert {b.name for b in gpu} == {"loading_bench", "precision_bench", "batching_bench", "variants_bench"}
    for argv, bench in zip(calls, gpu, strict=False):
        assert argv[3:] == list(bench.gpu)
    assert "--device" in gpu[0].gpu and "cuda" in gpu[0].gpu  # B2's loop runs on the GPU
    assert calls[-1][-1] == "--gpu"  # the summary writes the GPU table
    assert set(envs) == {str(run_all.GPU)}  # every script's results beside the CPU ones
    assert not times.exists()  # the CPU profiles' file is left alone: the GPU's times go with its results
    record = json.loads((tmp_path / "gpu" / "bench_times.json").read_text())["gpu"]
    assert record["missing"] == [] and record["one_run_s"] is not None and record["gpu"] is True


def test_a_script_outside_the_gpu_section_is_refused_by_name(bench_module, monkeypatch, capsys):
    run_all = bench_module("run_all")
    monkeypatch.setattr(run_all, "cuda_devices", lambda: 1)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--gpu", "--only", "balance_bench"])
    with pytest.raises(SystemExit):
        run_all.main()
    assert "not in the gpu profile: ['balance_bench']" in capsys.readouterr().err


def test_the_gpu_flags_are_options_of_their_scripts(bench_module):
    from tests.unit.bench.test_run_all import _options

    for bench in bench_module("run_all").SCRIPTS:
        named = {f for f in bench.gpu or () if f.startswith("--")}
        assert named <= _options(bench.script), bench.script


def test_the_results_folder_follows_the_environment(bench_module, monkeypatch):
    paths = bench_module("paths")
    monkeypatch.delenv("AIGC_BENCH_RESULTS", raising=False)
    assert paths.results_path("x.json") == paths.DEFAULT / "x.json"
    monkeypatch.setenv("AIGC_BENCH_RESULTS", str(paths.GPU))
    assert paths.results_path("x.json") == paths.GPU / "x.json"


def _feeding(kept: int, ratio: float) -> dict:
    cell = {"median": 1000.0, "min_max": [900.0, 1100.0], "runs": 3}
    return {"samples": kept, "loop background": cell, "loop inline": cell, "loop text-only": cell,
            "text_only_vs_image_text": ratio, "text_only_vs_inline": 1.9}


def test_the_gpu_table_has_the_gpu_comparisons_only_and_its_own_docs_block(bench_module, tmp_path, monkeypatch):
    summary = bench_module("summary")
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    (gpu / "loading.json").write_text(json.dumps({
        "device": "cuda", "lake": "folder", "reading": {}, "feeding": _feeding(3000, 1.75),
        "feeding_by_size": {"1500": _feeding(1500, 1.55), "3000": _feeding(3000, 2.5)}}))
    monkeypatch.setattr(summary, "GPU", gpu)
    monkeypatch.setattr(sys, "argv", ["summary.py", "--gpu", "--no-docs"])
    summary.main()
    md = (gpu / "summary.md").read_text()
    assert "B3" not in md and "B7" not in md  # no GPU form: left out, not "not run"
    assert f"B6 variants | not run (no {gpu / 'variants.json'})" in md
    b2 = [line for line in md.splitlines() if line.startswith("| B2")]
    assert len(b2) == 2 and "1500 pairs, folder, model on cuda" in b2[0] and b2[1].endswith("| MISSED |")
    assert "`loading.json`: host, date and commit not recorded" in md  # written before the stamp
    doc = "<!-- generated: gpu-bench-table -->\nOLD GPU TABLE\n<!-- end of generated -->\n"
    text = summary.regenerate(doc)
    assert "OLD GPU TABLE" not in text and "B2 loading" in text and "B5" not in text


def test_a_gpu_batching_row_whose_clock_read_kernel_launches_is_marked_not_valid(bench_module):
    summary = bench_module("summary")
    row = {"workload": "attention_gpu", "items": 4000, "budget_bytes": None, "oracle": "fixed_64",
           "ours_vs_oracle": 0.51, "oom_rate": 0.0, "repeats": 3}
    assert summary.batching_rows({"rows": [], "gpu": [row]})[0][4].startswith("not valid")
    # Under a budget the accountant waited for each batch; from the fix on, every GPU batch waits.
    for fixed in ({**row, "budget_bytes": 1e9}, {**row, "synchronized": True}):
        assert summary.batching_rows({"rows": [], "gpu": [fixed]})[0][4].startswith("0.51x")


def test_on_cuda_each_round_probes_every_configuration_in_one_process_on_the_cpu_each_in_its_own(bench_module,
                                                                                                  monkeypatch):
    bench = bench_module("precision_bench")
    argvs = []

    def run(argv, **_kw):
        argvs.append(argv)
        configs = argv[argv.index("--probe") + 1].split(",")
        lines = [json.dumps({"config": c, "device": argv[argv.index("--device") + 1], "steps": 2,
                             "samples_per_s": 100.0 + i, "peak_bytes": 2 << 20, "peak_above_held_bytes": 1 << 20,
                             "memory": "m"}) for i, c in enumerate(configs)]
        return subprocess.CompletedProcess(argv, 0, "\n".join(["noise", *lines]), "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    configs = ["32/fp32", "32/bf16", "64/fp32"]
    out = bench.run_probes(configs, "cuda", rounds=3, steps=2, max_s=1.0)
    assert [a[a.index("--probe") + 1] for a in argvs] == ["32/fp32,32/bf16,64/fp32", "32/bf16,64/fp32,32/fp32",
                                                         "64/fp32,32/fp32,32/bf16"]  # the order rotates
    assert all(out[c]["runs"] == 3 and out[c]["device"] == "cuda" for c in configs)
    assert out["32/fp32"]["min_max"] == [100.0, 102.0]  # each line went to its own configuration
    argvs.clear()
    bench.run_probes(configs, "cpu", rounds=2, steps=2, max_s=1.0)
    assert len(argvs) == 6 and all("," not in a[a.index("--probe") + 1] for a in argvs)


@pytest.mark.timeout(120)
def test_one_probe_process_answers_for_each_configuration_it_is_given_in_order():
    out = subprocess.run(bench_command("precision_bench", "--probe", "64/fp32,32/fp32", "--probe-steps", "2",
                                       "--probe-max-s", "0.5"), capture_output=True, text=True, check=True, cwd=ROOT)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [m["config"] for m in lines] == ["64/fp32", "32/fp32"] and all(m["steps"] == 2 for m in lines)


@pytest.mark.timeout(180)
def test_the_training_loop_comparison_runs_alone_on_a_chosen_device(tmp_path):
    out = subprocess.run(bench_command("loading_bench", "--feeding-only", "--device", "cpu", "--sizes", "200",
                                       "--repeats", "1", "--root", str(tmp_path / "lakes")),
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "AIGC_BENCH_RESULTS": str(tmp_path)})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["device"] == "cpu" and result["lake"] == "folder" and list(result["feeding_by_size"]) == ["200"]
    f = result["feeding"]
    assert f["samples"] == 200 and all(f[f"loop {m}"]["median"] > 0 for m in ("background", "inline", "text-only"))
    written = json.loads((tmp_path / "loading.json").read_text())  # written where the environment said,
    assert written.pop("provenance")["commit"] and written == result  # with where and when it was measured

