"""The README and the docs site: short, built strictly, and every figure generated from a results file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import summary
from tests.docs.figures import stray_figures

ROOT = Path(__file__).resolve().parents[2]

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_site_builds_strictly_so_a_broken_link_anchor_or_include_fails(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    # The workload guide's example is the tested file itself, included at build time.
    guide = (tmp_path / "site" / "workloads" / "index.html").read_text()
    code = re.sub(r"<[^>]+>", "", guide)
    assert "class TinySum(Workload):" in code and "def config_overrides(self, preset):" in code


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert text.splitlines()[3:5] == ["make demo   # set up (venv, Airflow home, DB) and run the pipeline for "
                                      "yesterday on a local lake", "make test   # set up, then the whole test suite: "
                                      "unit, DAG, a real S3 server, Airflow end to end"]
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which is not in the tree"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_figure_is_typed_outside_a_generated_block(path):
    found = stray_figures(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)}: figures typed by hand (line, kind, text): {found}; quote them "
                       "from bench/results through a generated block (bench/summary.py BLOCKS), or say it in words")


def test_every_generated_block_is_what_the_results_files_give():
    """A block edited by hand, or left behind by a results file that changed, differs from its regeneration."""
    names = []
    for path in DOCUMENTS:
        text = path.read_text()
        names += [m["name"] for m in summary.BLOCK.finditer(text)]
        assert summary.regenerate(text) == text, f"{path.relative_to(ROOT)}: run `python -m bench.summary`"
    assert {"bench-claims", "make-test", "bench-table", "gpu-bench-table", "demo-dates"} <= set(names)


def test_the_lint_finds_what_a_person_types_after_a_measurement_and_spares_settings():
    typed = ["int8 is 2.3× faster than fp32", "it reads 5,011 rows/s", "one step takes ~0.13 s",
             "the merge (≈15 600 rows/s here)", "waste 1.6 % for ours", "a row-count split gives 22–134%",
             "`make demo` took 4 minutes", "measured 2026-12-03 on 2 cores", "a fresh clone of 1d25c41",
             "| 1 000 | 429 (419–431) | 16 853 |", "2–4x slower than ours"]
    for line in typed:
        assert stray_figures(line), line
    settings = ["shards roll at 64 MiB by default", "max_imbalance (≤ 5 %)", "the rendezvous waits 30 min at most",
                "a 16×16 grid and 8×8 thumbnails", "Great Expectations 1.x", "the seed's ×1.2/×0.7 batcher",
                "`aigc prepare --date 2026-11-28`", "```\nspeed 3.4x\n```", "goal ≥ 1.7×",
                "<!-- generated: x -->\n| 1.5x |\n<!-- end of generated -->"]
    for text in settings:
        assert stray_figures(text) == [], text


def test_a_block_names_its_files_provenance_and_says_when_a_file_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(summary, "DEFAULT", tmp_path)
    assert summary.make_test_md().startswith("`make test`'s time: not measured")
    assert "not run (`make demo-dates`)" in summary.demo_dates_md()
    assert "`demo_dates_hf-diffusion.json`: not run" in summary.demo_front_md()
    point = {"variant": "fp32-s10", "policy": "adaptive", "latency_ms": 41.0, "latency_range_ms": [41.0, 44.5],
             "alignment_ci": {"value": 0.5, "lo": 0.4, "hi": 0.6}, "as_good": True, "size_bytes": 2e6,
             "clip_score": 31.25, "on_front": True}
    (tmp_path / "demo_dates_hf-diffusion.json").write_text(json.dumps({
        "dates": [{"date": "2026-11-20", "version": "v0001", "passed": True, "recommended": "fp32-s10/adaptive",
                   "points": [point, {**point, "variant": "fp32", "latency_ms": 90.0, "on_front": False}]}],
        "provenance": {"host": "h", "date": "2026-12-05T00:00:00", "commit": "abc"}}))
    front = summary.demo_front_md().splitlines()
    assert "recommended **fp32-s10/adaptive**" in front[0] and "commit abc" in front[0]
    assert front[4] == ("| fp32-s10 | adaptive | 0.500 [0.400, 0.600] |  | 31.250 |  | yes | 41.0 (41.0–44.5) | 2.0 |  "
                        "|  | yes |")
    assert front[5].startswith("| fp32 | adaptive |") and front[5].endswith("|  |")  # cheapest first; off the front
    (tmp_path / "make_test.json").write_text('{"wall_s": 900, "setup_s": 60, "tests": 3, "passed": 2, "skipped": 1, '
                                             '"provenance": {"host": "h", "date": "2026-12-05T00:00:00", '
                                             '"commit": "abc"}}')
    assert summary.make_test_md() == ("`make test` on a fresh clone took 15.0 min: the install 1.0 min, then 3 tests "
                                      "(2 passed, 1 skipped) in 14.0 min; on h; 2026-12-05; commit abc, against a "
                                      "budget of 15 min.")
    # Another host's run, kept beside (bench/make_test_time.py: other_hosts), is said too.
    other = {"wall_s": 1200, "setup_s": 120, "tests": 3, "passed": 3, "skipped": 0,
             "provenance": {"host": "slow", "date": "2026-12-04T00:00:00", "commit": "def"}}
    data = {**json.loads((tmp_path / "make_test.json").read_text()), "other_hosts": [other]}
    (tmp_path / "make_test.json").write_text(json.dumps(data))
    assert summary.make_test_md().endswith("On another host it took 20.0 min: the install 2.0 min, then 3 tests "
                                           "(3 passed, 0 skipped) in 18.0 min; on slow; 2026-12-04; commit def.")


def test_a_recommendation_among_models_that_learned_nothing_gives_no_verdict():
    trained = {c: {"alignment_ci": {"lo": 0.02, "hi": 0.10}, "alignment": 0.05, "final_val_loss": 0.01,
                   "grad": {"spikes": 0, "skipped_steps": 0}} for c in ("32/fp32", "32/bf16")}
    probe = {c: {"samples_per_s": 300.0, "min_max": [290.0, 310.0], "peak_mib": 500.0, "peak_above_held_mib": 20.0,
                 "device": "cpu", "runs": 3} for c in trained}
    d = {"steps": 150, "global_batch": 64, "probe": probe, "trained": trained, "recommended": "32/bf16",
         "apply": {}, "front": ["32/bf16"], "device": "cpu"}
    last = summary.precision_rows(d)[-1]
    assert last[4].startswith("no verdict") and last[6] == "n/a"
    trained["32/fp32"]["alignment_ci"] = {"lo": 0.78, "hi": 0.90}
    last = summary.precision_rows(d)[-1]
    assert last[4].startswith("32/bf16") and last[6] == "met"
