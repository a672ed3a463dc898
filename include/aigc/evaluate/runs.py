"""Where stage 5 finds its input and writes its run: the generation run to judge and the evaluation's folder.

    evaluations/<model>/dt=<date>/run=<id>/     metrics.json, pareto.json, review/, report.html (the workload's)
"""

from __future__ import annotations

import datetime as dt

from aigc.generate.run import MANIFEST as GENERATION_MANIFEST
from aigc.generate.run import generation_prefix, generation_rows
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix


def evaluation_prefix(model: str, date: str | dt.date, run_id: str) -> str:
    return run_prefix(partition("evaluations", model, date), run_id)


def latest_generation(lake: Lake, model: str, date: str, run_id: str | None = None) -> dict:
    """The manifest of a generation run of ``date``: the one named, else the newest finished one made by a model
    other than production (production's runs answer prompt files; there is nothing to promote)."""
    part = partition("generations", model, date)
    runs = sorted({k.split("/")[3] for k in lake.list(part) if k.endswith("/" + GENERATION_MANIFEST)})
    if run_id:
        runs = [r for r in runs if r == f"run={run_id}"]
    manifests = (lake.get_json(join(part, r, GENERATION_MANIFEST)) for r in reversed(runs))
    found = next((m for m in manifests if run_id or m.get("model_ref") != "production"), None)
    if found is None:
        raise LookupError(f"no finished generation run{' ' + run_id if run_id else ' of a candidate'} under "
                          f"{lake.url(part)} (run aigc generate first)")
    return found


def generated_rows(lake: Lake, generation: dict) -> list[dict]:
    prefix = generation_prefix(generation["model"], generation["date"], generation["run_id"])
    manifest = lake.get_json(join(prefix, GENERATION_MANIFEST))
    return generation_rows(lake, manifest).to_pylist()
