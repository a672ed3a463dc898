"""``make bench``'s two profiles name flags their scripts really take, and a standard profile run records its
times apart from the full one's."""

from __future__ import annotations

import json
import re
import sys

from tests.unit.bench.conftest import BENCH


def _options(script: str) -> set[str]:
    return set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", (BENCH / script).read_text()))


def test_every_flag_of_both_profiles_is_an_option_of_its_script(bench_module):
    run_all = bench_module("run_all")
    for bench in run_all.SCRIPTS:
        assert (BENCH / bench.script).exists(), bench.script
        options = _options(bench.script)
        for flags in (bench.standard, bench.full):
            named = {f for f in flags if f.startswith("--")}
            assert named <= options, f"{bench.script}: {sorted(named - options)} are not its options"


def test_a_run_records_its_profile_times_apart_and_keeps_the_other_profiles(bench_module, tmp_path, monkeypatch):
    run_all = bench_module("run_all")
    times = tmp_path / "bench_times.json"
    times.write_text(json.dumps({"full": {"seconds": {"prepare_bench": 100.0}, "total_s": 3000.0}}))
    monkeypatch.setattr(run_all, "RESULTS", times)
    calls = []
    monkeypatch.setattr(run_all.subprocess, "call", lambda argv, env=None, cwd=None: calls.append(argv) or 0)
    monkeypatch.setattr(run_all.subprocess, "check_call", lambda argv, cwd=None: calls.append(argv) or 0)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--only", "prepare_bench", "balance_bench"])
    run_all.main()
    assert [c[1:3] for c in calls[:2]] == [["-m", "bench.prepare_bench"], ["-m", "bench.balance_bench"]]
    assert calls[1][3:] == list(run_all.SCRIPTS[5].standard) and calls[-1][1:3] == ["-m", "bench.summary"]
    record = json.loads(times.read_text())
    assert record["full"]["total_s"] == 3000.0  # the other profile's record is kept as it was
    standard = record["standard"]
    assert set(standard["seconds"]) == {"prepare_bench", "balance_bench"} and standard["goal_s"] == 25 * 60
    assert len(standard["missing"]) == len(run_all.SCRIPTS) - 2 and "one_run_s" not in standard
    assert "CPUs" in standard["host"]
