"""What the lake holds, for people: dates, published runs, gate verdicts, the registry, reports.

Read-only and backend-agnostic. ``aigc status`` and the Airflow "AIGC" view both read through
here, so the layout knowledge below (which stage writes which summary, which gate judges it)
lives in one place. Everything returned is plain JSON-able data with lake *keys* (not URIs):
a caller decides how to show a key (``lake.url`` for the CLI, an HTTP route for the view).

Only published runs are shown as a stage's result (readers follow ``_PUBLISHED.json``), but
every gate verdict of a date is listed, so a run that failed its gate is visible with why.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from aigc.generate.run import MANIFEST as GENERATION_MANIFEST
from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import NAME, RUN_ID, join, parse_date, partition, validate_key
from aigc.lake.publish import NotPublished, resolve
from aigc.prepare.run import MANIFEST as CURATED_MANIFEST
from aigc.registry import Registry
from aigc.telemetry import training_figures

TRAINING_SUMMARY = "_SUMMARY.json"  # aigc.train.artifacts.SUMMARY; not imported: that module imports torch
_DATE_FOLDER = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
_REPORT_KEY = re.compile(  # the names and run ids that keys.py validates, without their anchors
    rf"(?:^|/)(evaluations/{NAME.pattern.strip('^$')}/dt=\d{{4}}-\d{{2}}-\d{{2}}/run={RUN_ID.pattern.strip('^$')}"
    r"/report\.html)$")


@dataclass(frozen=True)
class Stage:
    """A stage as its readers see it: where its partitions are, what it writes, which gate judges it."""

    name: str
    """Partition root: ``<name>/<dataset or model>/dt=<date>/``."""
    gate: str
    """The gate's folder: ``quality/<gate>/dt=<date>/run=<run_id>/result.json``."""
    keyed_by: str
    """``"dataset"`` or ``"model"``: which configured name is the partition's second segment."""
    summary: str
    """The JSON object in a run folder that summarises the run (manifest, training summary, metrics)."""


STAGES = (
    Stage("curated", "curated", "dataset", CURATED_MANIFEST),
    Stage("training", "training", "model", TRAINING_SUMMARY),
    Stage("generations", "generate", "model", GENERATION_MANIFEST),
    Stage("evaluations", "evaluation", "model", "metrics.json"),
)
DEPLOY_GATE = "deploy"  # gate 3 judges a registry version, so its run folder is named by the version
GATES = ("curated", "training", DEPLOY_GATE, "generate", "evaluation")  # pipeline order


def gate_5_verdict(success: bool | None, failed_checks: list[dict]) -> str:
    """How gate 5's verdict reads: "not judged", "passed", "not enough evidence" (every check that did not pass is
    undecided: more samples could still pass it) or "failed"."""
    if success is None:
        return "not judged"
    if success:
        return "passed"
    undecided = failed_checks and all(c.get("outcome") == "undecided" for c in failed_checks)
    return "not enough evidence" if undecided else "failed"


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage {name!r}; stages: {[s.name for s in STAGES]}")


def report_key(uri: str) -> str | None:
    """The lake key of an evaluation report from its full URI (any lake root), else None."""
    match = _REPORT_KEY.search(uri or "")
    return validate_key(match.group(1)) if match else None


class Catalog:
    """The published state of one dataset and one model in a lake."""

    def __init__(self, lake: Lake, dataset: str, model: str):
        self.lake = lake
        self.dataset, self.model = dataset, model

    def root(self, stage_name: str) -> str:
        """``<stage>/<dataset or model>``: where a stage's partitions live."""
        s = stage(stage_name)
        return join(s.name, self.dataset if s.keyed_by == "dataset" else self.model)

    def partition(self, stage_name: str, date: str | dt.date) -> str:
        return join(self.root(stage_name), f"dt={parse_date(date).isoformat()}")

    # -- dates ---------------------------------------------------------------------------
    def dates(self) -> list[str]:
        """Every date any stage has a partition for, newest first."""
        found: set[str] = set()
        for s in STAGES:
            found.update(_dates_under(self.lake, self.root(s.name)))
        return sorted(found, reverse=True)

    # -- one stage of one date -------------------------------------------------------------
    def pointer(self, stage_name: str, date: str | dt.date) -> dict | None:
        """Which run of a stage's partition is published (and when); None if none is. For generations: the date's
        content (``purpose``: content), else the generation run its published evaluation scored (evaluation set)."""
        try:
            pointer = resolve(self.lake, self.partition(stage_name, date))
        except NotPublished:
            return self._evaluation_set_pointer(date) if stage_name == "generations" else None
        return {"run_id": pointer["run_id"], "run_prefix": pointer["run_prefix"],
                "published_at": pointer.get("published_at"),
                **({"purpose": "content"} if stage_name == "generations" else {})}

    def _evaluation_set_pointer(self, date: str | dt.date) -> dict | None:
        try:
            pointer = resolve(self.lake, self.partition("evaluations", date))
        except NotPublished:
            return None
        prefix = pointer.get("generations")
        return prefix and {"run_id": prefix.rsplit("run=", 1)[-1], "run_prefix": prefix,
                           "published_at": pointer.get("published_at"), "purpose": "evaluation set"}

    def published(self, stage_name: str, date: str | dt.date) -> dict | None:
        """The published run with the stage's summary object of it (manifest, training summary, metrics)."""
        run = self.pointer(stage_name, date)
        if run is None:
            return None
        summary_key = join(run["run_prefix"], stage(stage_name).summary)
        summary = self.lake.get_json(summary_key)
        if stage_name == "training":  # each node's GPU figures lie beside the summary rank 0 wrote
            summary = {**summary, "gpu": training_figures(self.lake, run["run_prefix"])}
        return {**run, "summary_key": summary_key, "summary": summary}

    def gate_result(self, gate: str, date: str | dt.date, run_id: str) -> dict | None:
        """One gate verdict (without GX's full per-expectation results); None if the gate has not run."""
        key = join(partition("quality", gate, date), f"run={run_id}", "result.json")
        try:
            return _verdict(gate, key, self.lake.get_json(key))
        except ObjectNotFound:
            return None

    def gate_results(self, gate: str, date: str | dt.date) -> list[dict]:
        """Every verdict of ``gate`` on ``date`` (one per run judged), newest run first."""
        keys = [k for k in self.lake.list(partition("quality", gate, date)) if _is_result(k)]
        return [_verdict(gate, k, self.lake.get_json(k)) for k in sorted(keys, reverse=True)]

    # -- overviews -------------------------------------------------------------------------
    def runs(self) -> list[dict]:
        """Per date, newest first: which run of each stage is published, and every gate verdict."""
        return [{"date": date, "published": {s.name: self.pointer(s.name, date) for s in STAGES},
                 "gates": {g: self.gate_results(g, date) for g in GATES}} for date in self.dates()]

    def day(self, date: str | dt.date) -> dict:
        """Everything about one date: each stage's published run with its summary, every gate
        verdict, and the registry versions trained for it."""
        date = parse_date(date).isoformat()
        registry = self.registry()
        return {"date": date, "published": {s.name: self.published(s.name, date) for s in STAGES},
                "gates": {g: self.gate_results(g, date) for g in GATES},
                "versions": [v for v in registry["versions"] if v["date"] == date], "aliases": registry["aliases"],
                "evaluation": self.evaluation_of(date)}

    def registry(self) -> dict:
        """Versions (oldest first) with their variants' eligibility, the aliases and their history."""
        registry = Registry(self.lake, self.model)
        doc = registry.aliases()
        versions = [_version(v, doc["aliases"]) for v in registry.versions()]
        return {"model": self.model, "aliases": doc["aliases"], "history": doc["history"], "versions": versions}

    def evaluation_of(self, date: str | dt.date) -> dict | None:
        """The newest evaluation run of ``date``, published or not, with gate 5's verdict in plain words
        and the keys of its report and the gallery it judged; None if the date has none.

        A run that failed gate 5 is not published, yet its report and gallery are what a user needs
        to see why: this is how ``aigc status`` and the view find them.
        """
        part = self.partition("evaluations", date)
        runs = sorted({k.split("/")[3].removeprefix("run=") for k in self.lake.list(part)
                       if k.endswith("/metrics.json") and k.count("/") == 4})
        if not runs:
            return None
        run_id = runs[-1]
        prefix = join(part, f"run={run_id}")
        metrics = self.lake.get_json(join(prefix, "metrics.json"))
        pointer = self.pointer("evaluations", date)
        gate = self.gate_result("evaluation", date, run_id)
        judged = (metrics.get("gates") or {}).get("evaluation") or {}
        files = {name: join(prefix, name) for name in ("report.html", "pareto.png", "gallery.png")}
        return {"run_id": run_id, "run_prefix": prefix, "summary": metrics,
                "published": bool(pointer and pointer["run_id"] == run_id),
                "gate": gate, "failed_checks": [c for c in judged.get("checks", []) if not c["passed"]],
                "files": {n: k for n, k in files.items() if self.lake.exists(k)}}

    def latest_evaluation(self) -> dict | None:
        """The newest date's published evaluation, with the keys of its report and plots; None if none."""
        for date in self.dates():
            run = self.published("evaluations", date)
            if run:
                files = {name: join(run["run_prefix"], name) for name in ("report.html", "pareto.png", "gallery.png")}
                return {**run, "date": date, "files": {n: k for n, k in files.items() if self.lake.exists(k)}}
        return None


def _dates_under(lake: Lake, root: str) -> set[str]:
    # The lake lists objects, not folders: take the date segment of every key under the root.
    depth = root.count("/") + 1
    dates = set()
    for key in lake.list(root):
        parts = key.split("/")
        match = _DATE_FOLDER.match(parts[depth]) if len(parts) > depth + 1 else None
        if match:
            dates.add(match.group(1))
    return dates


def _is_result(key: str) -> bool:
    # quality/<gate>/dt=<date>/run=<id>/result.json: not a Data Docs page that happens to share the name
    parts = key.split("/")
    return len(parts) == 5 and parts[3].startswith("run=") and parts[4] == "result.json"


def _verdict(gate: str, key: str, result: dict) -> dict:
    folder = key.rsplit("/", 1)[0]
    return {"gate": gate, "run_id": folder.rsplit("/", 1)[1].removeprefix("run="), "success": bool(result["success"]),
            "failures": list(result.get("failures", [])), "result_key": key,
            "data_docs_key": join(folder, "data_docs", "index.html"),
            "tables": {name: t.get("rows") for name, t in result.get("tables", {}).items()}}


def _version(record: dict, aliases: dict) -> dict:
    smoke = record.get("smoke_test") or {}
    eligible = smoke.get("eligible_variants")
    variants = {
        name: {"size_bytes": v.get("size_bytes"), "latency_ms_b1": v.get("latency_ms_b1"),
               "pixel_mae_vs_fp32": v.get("pixel_mae_vs_fp32"), "agreement_vs_fp32": v.get("agreement_vs_fp32"),
               "eligible": None if eligible is None else name in eligible}  # None: gate 3 has not judged it
        for name, v in sorted(record.get("variants", {}).items())
    }
    return {"version": record["version"], "date": record.get("date"), "registered_at": record.get("registered_at"),
            "aliases": sorted(a for a, target in aliases.items() if target == record["version"]),
            "training": record.get("training", {}), "variants": variants, "eligible_variants": eligible,
            "smoke_test_passed": smoke.get("passed"), "recommended": record.get("recommended"),
            "training_run": record.get("training_run")}
