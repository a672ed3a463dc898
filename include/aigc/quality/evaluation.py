"""Gate 5 (evaluate → publish): is the day's content good enough, and better than production?

On pass, ``promote_and_publish`` moves ``production`` to the evaluated version (recording the
recommended variant and batch policy) and publishes the day's generations and evaluation. On
fail nothing moves: the reasons are in the exception, in ``quality/evaluation/…`` and in the
report, which is re-written with the gate's verdict either way.
"""

from __future__ import annotations

import math

import pandas as pd

from aigc.config import EvaluationGateThresholds, PipelineConfig
from aigc.evaluate.report import write_report
from aigc.evaluate.run import evaluation_prefix
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.lake.publish import publish
from aigc.quality.gate import GateFailed, Table, run_gate
from aigc.registry import Registry

GATE = "evaluation"


def validate_evaluation(lake: Lake, evaluated: dict, thresholds: EvaluationGateThresholds) -> dict:
    import great_expectations.expectations as gxe

    prefix = evaluation_prefix(evaluated["model"], evaluated["date"], evaluated["run_id"])
    metrics = lake.get_json(join(prefix, "metrics.json"))
    regression = metrics["regression_vs_production"]
    row = pd.DataFrame([{
        "alignment": metrics["alignment"]["all"] if metrics["alignment"]["all"] is not None else 0.0,
        "checker_accuracy": metrics["checker_accuracy"]["all"] or 0.0,
        "fid": metrics["fid"] if metrics["fid"] is not None and math.isfinite(metrics["fid"]) else 1e9,
        "safety_violations": metrics["safety_violations"],
        "regression_vs_production": regression if regression is not None else 0.0,
    }])
    table = Table("metrics", row, [
        gxe.ExpectColumnValuesToBeBetween(column="alignment", min_value=thresholds.min_alignment),
        gxe.ExpectColumnValuesToBeBetween(column="checker_accuracy", min_value=thresholds.min_checker_accuracy),
        gxe.ExpectColumnValuesToBeBetween(column="fid", max_value=thresholds.max_fid),
        gxe.ExpectColumnValuesToBeBetween(column="safety_violations", max_value=0),
        gxe.ExpectColumnValuesToBeBetween(column="regression_vs_production", max_value=thresholds.max_regression),
    ])
    result = run_gate(GATE, [table], lake, run_prefix(partition("quality", GATE, evaluated["date"]),
                                                      evaluated["run_id"]), raise_on_failure=False)
    metrics["gates"] = {GATE: {"success": result["success"], "failures": result["failures"],
                               "result_uri": result["result_uri"]}}
    lake.put_json(join(prefix, "metrics.json"), metrics)
    registry = Registry(lake, evaluated["model"])
    pareto = lake.get_json(join(prefix, "pareto.json"))
    write_report(lake, prefix, metrics, pareto["points"], pareto["front"], registry.get(evaluated["version"]),
                 {"model": evaluated["model"], "date": evaluated["date"], "run_id": evaluated["generation_run"]})
    if not result["success"]:
        raise GateFailed(GATE, result["failures"], result["result_uri"])
    return result


def promote_and_publish(lake: Lake, evaluated: dict, cfg: PipelineConfig) -> dict:
    """After gate 5: production → this version; the day's generations and evaluation published."""
    registry = Registry(lake, evaluated["model"])
    version = evaluated["version"]
    registry.update_record(version, recommended=evaluated["recommended"])
    aliases = registry.move("production", version, reason=(
        f"gate 5 passed for {evaluated['date']}: alignment {evaluated['alignment']:.3f}, "
        f"recommended {evaluated['recommended']['variant'] if evaluated['recommended'] else 'fp32'}"))
    generations = publish(lake, partition("generations", evaluated["model"], evaluated["date"]),
                          evaluated["generation_run"], manifest="_MANIFEST.json")
    evaluation = publish(lake, partition("evaluations", evaluated["model"], evaluated["date"]), evaluated["run_id"],
                         report="report.html")
    return {"stage": "publish", "date": evaluated["date"], "production": aliases["aliases"]["production"],
            "previous": aliases["aliases"].get("previous"), "recommended": evaluated["recommended"],
            "generations_uri": lake.url(generations["run_prefix"]),
            "report_uri": lake.url(join(evaluation["run_prefix"], "report.html"))}
