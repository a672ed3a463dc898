"""A workload from outside include/aigc, installed as a user installs theirs (an entry point of the
aigc.workloads group), trained by the pipeline's own stage 2: torchrun, gate 2, publication.

The stages that have no workload hooks yet (issue 18 moves them one by one) refuse it by name."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aigc.lake import LocalLake
from aigc.lake.keys import join, partition, run_prefix
from aigc.lake.publish import publish

PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "external_workload"
DATE = "2026-11-20"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The package installed (pip, no dependencies) into a folder of its own, put on PYTHONPATH by the tests."""
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("build") / "src"
    shutil.copytree(PACKAGE, source)  # setuptools builds in the source folder: not in the checkout
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)],
                   check=True, env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
    assert (next(target.glob("aigc_tiny_sum-*.dist-info")) / "entry_points.txt").exists()
    return target


def publish_sums(lake: LocalLake, date: str, n: int, seed: int) -> None:
    """A published curated partition of the workload's rows, as its stage 1 would leave it."""
    numbers = np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)
    table = pa.table({"id": [f"{date}-{i:05d}" for i in range(n)], "numbers": numbers.tolist(),
                      "total": (numbers @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)).tolist()})
    run_id = f"{date.replace('-', '')}T000000000000Z-sums{seed:02d}"
    prefix = run_prefix(partition("curated", "sums", date), run_id)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    lake.put_bytes(join(prefix, "part-00000.parquet"), buf.getvalue())
    lake.put_json(join(prefix, "_manifest.json"), {"rows": n, "shards": [{"key": join(prefix, "part-00000.parquet")}]})
    publish(lake, partition("curated", "sums", date), run_id, manifest="_manifest.json")


def aigc(site: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "aigc.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_an_installed_workload_is_trained_gated_and_published_by_the_core(site, tmp_path):
    lake = LocalLake(tmp_path / "lake")
    for back, seed in ((1, 1), (0, 2)):  # two days of the training window
        publish_sums(lake, (dt.date.fromisoformat(DATE) - dt.timedelta(days=back)).isoformat(), 400, seed)
    rc, out, err = aigc(site, "train", "--workload", "tiny-sum", "--lake", lake.uri, "--date", DATE,
                        "--nproc", "2", "--threads", "1")
    assert rc == 0, err[-3000:]
    assert out["workload"] == "tiny-sum" and out["model"] == "tiny-sum-mlp" and out["world_size"] == 2
    assert out["published"] and out["samples"] == 800 and out["steps"] == 120  # the workload's preset changes
    assert out["final_val_loss"] < 0.2 * out["initial_val_loss"]  # it learned the rule, by gate 2's reading
    prefix = run_prefix(partition("training", "tiny-sum-mlp", DATE), out["run_id"])
    card = lake.get_json(join(prefix, "model.json"))
    assert card["workload"] == "tiny-sum" and card["model"] == {"inputs": 4, "hidden": 16}
    assert [p["date"] for p in card["lineage"]["curated"]] == ["2026-11-19", DATE]
    metrics = lake.read_parquet([join(prefix, "metrics.parquet")]).to_pandas()
    assert list(metrics.columns[:4]) == ["step", "epoch", "loss", "mae"]  # the workload's loss part, logged
    assert metrics["mae"].iloc[-1] < metrics["mae"].iloc[1]


def test_a_stage_the_workload_has_no_hooks_for_refuses_it_by_name(site, tmp_path):
    rc, out, err = aigc(site, "deploy", "--workload", "tiny-sum", "--lake", str(tmp_path / "lake"), "--date", DATE)
    assert rc == 1 and "workload 'tiny-sum' provides stage(s) ['train'], not 'deploy'" in out["error"]


def test_a_workload_by_module_path_and_an_unknown_one(site, tmp_path):
    rc, out, _ = aigc(site, "train", "--workload", "aigc_tiny_sum:TinySum", "--lake", str(tmp_path / "lake"),
                      "--date", DATE, "--no-gate")
    assert rc == 1 and "EmptyWindow" in out["error"] and "'sums'" in out["error"]  # resolved, then no data
    rc, out, _ = aigc(site, "train", "--workload", "nope", "--lake", str(tmp_path / "lake"), "--date", DATE)
    assert rc == 1 and "no workload 'nope'" in out["error"]
    assert "'image'" in out["error"] and "'tiny-sum'" in out["error"]  # what exists: built in, entry points
