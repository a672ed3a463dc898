"""The demo-preset model the project ships (``tests/fixtures/demo_model``, re-trained by its ``regenerate.py``),
installed in a lake: a model of demo quality without minutes of training, for the benches (B1, B6) and the tests.
Plain functions: nothing here imports pytest."""

from __future__ import annotations

import json
from pathlib import Path

from aigc.lake import LocalLake
from aigc.workloads.image import IMAGE

DEMO_MODEL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "demo_model"


def install_demo_model(root: Path) -> LocalLake:
    """A lake at ``root`` with the shipped demo-preset model (tests/fixtures/demo_model) registered as
    v0001, every variant of the demo built and gate 3 passed."""
    from aigc.config import preset
    from aigc.lake.keys import join, partition
    from aigc.quality.deploy import smoke_test
    from aigc.quality.training import publish_trained
    from aigc.registry.deploy import register_trained
    from aigc.workloads.image.variants import build_variants

    lake = LocalLake(root)
    summary = json.loads((DEMO_MODEL / "_SUMMARY.json").read_text())
    date, run_id = summary["date"], summary["run_id"]
    run = join(partition("training", "shapes-cvae", date), f"run={run_id}")
    for path in DEMO_MODEL.iterdir():
        if path.suffix in (".safetensors", ".json", ".parquet", ".png"):
            lake.put_bytes(join(run, path.name), path.read_bytes())
    publish_trained(lake, "shapes-cvae", date, run_id)
    cfg = preset("demo", IMAGE)
    version = register_trained(lake, "shapes-cvae", date)["version"]
    build_variants(lake, "shapes-cvae", version, cfg.deploy)
    smoke_test(lake, "shapes-cvae", version, cfg, date, IMAGE)
    return lake
