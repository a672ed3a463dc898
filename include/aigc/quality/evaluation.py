"""Gate 5 (evaluate → publish): is the day's content good enough, and not worse than production?

Each check reads a figure's interval and fails only when the whole interval is on the wrong side
of its threshold (``aigc.evaluate.stats``), so a model whose true figure meets the threshold is
failed by chance with probability ≤ (1 − confidence) / 2 per check. A failure says, in plain
words, what was measured, against which threshold, what it means and which field changes it.

On pass, ``promote_and_publish`` publishes the day's evaluation with the generations it scored, then moves
``production`` to the evaluated version (recording the recommended variant and batch policy)
unless it is significantly worse than production (``promotion``: champion and challenger). On
fail nothing moves: the reasons are in the exception, in ``quality/evaluation/…`` and at the
top of the report, which is re-written with the gate's verdict either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from aigc.config import EvaluationGateThresholds, PipelineConfig
from aigc.config.form import how_to_set
from aigc.evaluate.runs import evaluation_prefix
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.lake.publish import publish
from aigc.quality.gate import GateFailed, Table, run_gate
from aigc.registry import Registry

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

GATE = "evaluation"


@dataclass(frozen=True)
class Check:
    """One check of gate 5: the bound of an interval compared with a threshold, and what a failure means."""

    column: str
    title: str
    bound: float
    """The interval's end that must clear the threshold (upper end against a minimum, lower against a maximum)."""
    threshold: float
    at_least: bool
    observed: str
    """The figure as a person reads it: value, interval, sample size."""
    failure: str
    """Plain words shown when the check fails: what it means and what to do."""

    @property
    def passed(self) -> bool:
        return self.bound >= self.threshold if self.at_least else self.bound <= self.threshold

    def to_dict(self) -> dict:
        return {"check": self.column, "title": self.title, "passed": self.passed, "observed": self.observed,
                "threshold": f"{'≥' if self.at_least else '≤'} {self.threshold:g}",
                "explanation": None if self.passed else self.failure}


def figure(estimate: dict | None, scale: str = "{:.3f}") -> str:
    """'0.864 (95 % interval 0.836–0.888, n = 648)'."""
    if not estimate or estimate.get("value") is None:
        return f"not measurable (n = {estimate['n'] if estimate else 0})"
    if estimate.get("lo") is None:
        return f"{scale.format(estimate['value'])} (n = {estimate['n']})"
    return (f"{scale.format(estimate['value'])} ({estimate['confidence']:.0%} interval "
            f"{scale.format(estimate['lo'])}–{scale.format(estimate['hi'])}, n = {estimate['n']})")


def promotion(metrics: dict, t: EvaluationGateThresholds) -> dict:
    """Whether ``production`` moves to the evaluated version, and why, in words.

    It moves unless the paired interval on the evaluation set (same prompts and seeds, fp32 against
    fp32) says the candidate is worse than production by more than ``max_regression``. A candidate
    that clears gate 5 but loses to production is not a failure of the run: its content is
    published, and production stays (champion and challenger).
    """
    version, production = metrics["version"], metrics.get("production_before")
    regression = metrics["intervals"].get("regression_vs_production")
    if not production or regression is None or regression.get("lo") is None:
        return {"promote": True, "regression": None,
                "reason": f"{version} is production already" if production == version else "no production model yet"}
    shown = figure(regression)
    if regression["lo"] > t.max_regression:
        return {"promote": False, "regression": regression, "reason": (
            f"production {production} stays: on the same {regression['n']} prompts and seeds it beats {version} "
            f"by {shown} alignment (fp32 against fp32), significantly more than the allowed {t.max_regression:g}. "
            f"{version}'s content passed gate 5 and is published; to promote such a version anyway, raise "
            f"{how_to_set('evaluate_gate', 'max_regression')}, or promote it by hand with "
            f"`aigc registry promote --version {version}`")}
    return {"promote": True, "regression": regression, "reason": (
        f"{version} replaces production {production}: it is not significantly worse by more than "
        f"{t.max_regression:g} (production − {version}: {shown})")}


def validate_evaluation(lake: Lake, evaluated: dict, cfg: PipelineConfig, workload: Workload) -> dict:
    """Gate 5 on an evaluation run, by ``workload``'s checks (``Workload.evaluation_checks``)."""
    import great_expectations.expectations as gxe

    prefix = evaluation_prefix(evaluated["model"], evaluated["date"], evaluated["run_id"])
    metrics = lake.get_json(join(prefix, "metrics.json"))
    judged = workload.evaluation_checks(metrics, cfg)
    row = pd.DataFrame([{c.column: c.bound for c in judged}])
    expectations = [gxe.ExpectColumnValuesToBeBetween(column=c.column, min_value=c.threshold) if c.at_least else
                    gxe.ExpectColumnValuesToBeBetween(column=c.column, max_value=c.threshold) for c in judged]
    table = Table("metrics", row, expectations, explain={c.column: c.failure for c in judged})
    result = run_gate(GATE, [table], lake, run_prefix(partition("quality", GATE, evaluated["date"]),
                                                      evaluated["run_id"]), raise_on_failure=False)
    metrics["gates"] = {GATE: {"success": result["success"], "failures": result["failures"],
                               "checks": [c.to_dict() for c in judged], "result_uri": result["result_uri"]}}
    metrics["promotion"] = promotion(metrics, cfg.evaluate_gate) if result["success"] else None
    lake.put_json(join(prefix, "metrics.json"), metrics)
    registry = Registry(lake, evaluated["model"])
    pareto = lake.get_json(join(prefix, "pareto.json"))
    generation = {"model": evaluated["model"], "date": evaluated["date"], "run_id": evaluated["generation_run"]}
    workload.write_report(lake, prefix, metrics, pareto["points"], pareto["front"], registry.get(evaluated["version"]),
                          generation)
    if not result["success"]:
        raise GateFailed(GATE, result["failures"], result["result_uri"],
                         report_uri=lake.url(join(prefix, "report.html")))
    return result


def promote_and_publish(lake: Lake, evaluated: dict, cfg: PipelineConfig) -> dict:
    """After gate 5, publication first and promotion last, as one step:

    1. references that keep the evaluation and the generation run it scored (held by the evaluation run and by
       the evaluated version: garbage collection never leaves the version's lineage pointing at nothing);
    2. the version's record (the evaluation, the recommended variant, or why it was not promoted);
    3. the evaluation's publication, which names its generation run: a candidate's generations are its
       evaluation set, published with it, never content for users (the generations pointer is production's);
    4. one compare-and-swap on the aliases that moves ``production`` (unless the version is significantly worse
       than production: ``promotion``) and records the decision.

    A failure at any step leaves the previous production in force; a retry redoes the steps, each idempotent."""
    from aigc.generate.run import generation_prefix
    from aigc.lake import refs

    model, date, run_id = evaluated["model"], evaluated["date"], evaluated["run_id"]
    registry = Registry(lake, model)
    version = evaluated["version"]
    prefix = evaluation_prefix(model, date, run_id)
    generation_run = generation_prefix(model, date, evaluated["generation_run"])
    metrics = lake.get_json(join(prefix, "metrics.json"))
    decision = metrics.get("promotion") or promotion(metrics, cfg.evaluate_gate)
    refs.hold(lake, prefix, [generation_run], why=f"the generation run evaluation {run_id} scored")
    refs.hold(lake, registry.version_prefix(version), [prefix, generation_run],
              why=f"{version}'s evaluation for {date} and the generations it scored")
    verdict = ({"recommended": evaluated["recommended"]} if decision["promote"]
               else {"not_promoted": {"date": date, "reason": decision["reason"]}})
    registry.update_record(version, evaluation={"date": date, "run": prefix, "generation_run": generation_run},
                           **verdict)
    evaluation = publish(lake, partition("evaluations", model, date), run_id, report="report.html",
                         generations=generation_run)
    reason = (f"gate 5 passed for {date}: alignment {evaluated['alignment']:.3f}, recommended "
              f"{evaluated['recommended']['variant'] if evaluated['recommended'] else 'fp32'}; {decision['reason']}")
    aliases = registry.decide(version, promote=decision["promote"], reason=reason if decision["promote"]
                              else decision["reason"], evaluation=prefix, date=date)
    return {"stage": "publish", "date": date, "promoted": decision["promote"],
            "promotion": decision["reason"], "production": aliases["aliases"].get("production"),
            "previous": aliases["aliases"].get("previous"), "recommended": evaluated["recommended"],
            "generations_uri": lake.url(generation_run),
            "report_uri": lake.url(join(evaluation["run_prefix"], "report.html"))}
