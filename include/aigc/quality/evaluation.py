"""Gate 5 (evaluate → publish): is the day's content good enough, and not worse than production?

The recommended configuration's alignment on the evaluation set passes only on evidence (``evidence_check``: the
interval's lower end clears the minimum; the evaluation looks at more prompts while it is undecided,
``aigc.evaluate.stats.sequential_rate``), so a model below the minimum passes by chance with probability at most
(1 − confidence) / 2. The other checks fail when the whole interval is on the wrong side of their threshold, so a
model whose true figure meets it is failed by chance with probability ≤ (1 − confidence) / 2 per check. A failure
says, in plain words, what was measured, against which threshold, what it means and which field changes it.

On pass, ``promote_and_publish`` publishes the day's evaluation with the generations it scored, then moves
``production`` to the evaluated version (recording the recommended variant and batch policy)
only on evidence that it is no worse than production by more than ``max_regression`` and not significantly
worse than the best version that was production (``promotion``: champion and challenger). On
fail nothing moves: the reasons are in the exception, in ``quality/evaluation/…`` and at the
top of the report, which is re-written with the gate's verdict either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from aigc.config import EvaluationGateThresholds, PipelineConfig
from aigc.config.form import how_to_set
from aigc.evaluate.runs import evaluation_prefix
from aigc.evaluate.stats import outcome
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
    """The interval's end that decides: its lower end against a minimum and its upper end against a maximum for a
    check that needs evidence (``evidence_check``), the other end for one that fails only when significantly
    wrong."""
    threshold: float
    at_least: bool
    observed: str
    """The figure as a person reads it: value, interval, sample size."""
    failure: str
    """Plain words shown when the check fails: what it means and what to do."""
    undecided: str | None = None
    """Set when the check needs evidence and the interval straddles the threshold: "not enough evidence", what was
    measured, and what would draw more samples. The check does not pass."""
    evidence: dict | None = None
    """For a check that drew samples in looks: the looks taken and the rates it is designed for
    (``metrics["evidence"]``: ``aigc.evaluate.stage.with_design``)."""

    @property
    def passed(self) -> bool:
        return self.bound >= self.threshold if self.at_least else self.bound <= self.threshold

    @property
    def outcome(self) -> str:
        return "pass" if self.passed else "undecided" if self.undecided else "fail"

    @property
    def explanation(self) -> str | None:
        return None if self.passed else self.undecided or self.failure

    def to_dict(self) -> dict:
        e = self.evidence or {}
        d = e.get("designed") or {}
        return {"check": self.column, "title": self.title, "passed": self.passed, "outcome": self.outcome,
                "observed": self.observed, "threshold": f"{'≥' if self.at_least else '≤'} {self.threshold:g}",
                "explanation": self.explanation,
                "looks": f"{e['rounds']} of {e['max_rounds']}" if e else "1",
                "designed": (f"false pass {d['false_pass_at_threshold']:.3f} at {d['threshold']:g} (at most "
                             f"{d['false_pass_bound']:g}); false failure {d['false_failure_at_expected']:.3f} at "
                             f"{d['expected']:g}" if d else None)}


def checks_html(checks: list[dict]) -> str:
    """Gate 5's checks as a report's table: each with its outcome, interval and sample, looks and designed rates."""
    import html

    head = "".join(f"<th>{h}</th>" for h in ("check", "observed", "threshold", "outcome", "looks", "designed for"))
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
        c["title"], c["observed"], c["threshold"], c.get("outcome", "pass" if c["passed"] else "fail"),
        c.get("looks", "1"), c.get("designed") or "")) + "</tr>" for c in checks)
    return f"<table><tr>{head}</tr>{rows}</table>"


def by_device_html(metrics: dict) -> str:
    """A report's "Recommended per device class" section: what ``auto`` serves on each worker class stage 5 timed
    (``metrics["recommended_by_device"]``, ``aigc.evaluate.devices``)."""
    import html

    rows = "".join(f"<tr><th>{html.escape(cls)}</th><td>{html.escape(str(rec['variant']))}</td>"
                   f"<td>{html.escape(str(rec.get('policy')))}</td><td>{rec['latency_ms']:.3f}</td></tr>"
                   if rec else f"<tr><th>{html.escape(cls)}</th><td colspan=3>none: no configuration measured</td></tr>"
                   for cls, rec in sorted((metrics.get("recommended_by_device") or {}).items()))
    return (f"<h2>Recommended per device class</h2><p>What <code>generate.variant=auto</code> serves on a worker of "
            f"each class the variants were timed on (ms per sample on that class).</p><table><tr><th>class</th>"
            f"<th>variant</th><th>policy</th><th>ms</th></tr>{rows}</table>")


def gpu_html(metrics: dict) -> str:
    """A report's "GPU use" section: what the GPUs did for the version's training and the day's generation
    (``metrics["gpu"]``, from ``aigc.telemetry``), or why nothing was recorded."""
    import html

    from aigc.telemetry import figures_shown

    rows = "".join(f"<tr><th>{html.escape(task)}</th><td>{html.escape(name)}</td><td>{html.escape(value)}</td></tr>"
                   for task in ("training", "generation")
                   for name, value in figures_shown((metrics.get("gpu") or {}).get(task)).items())
    return f"<h2>GPU use</h2><table>{rows}</table>"


def evidence_check(column: str, title: str, estimate: dict | None, threshold: float, failure: str, *,
                   more: str, at_least: bool = True, scale: str = "{:.3f}", looked: dict | None = None) -> Check:
    """A check that passes only on evidence: a minimum when the interval's lower end clears it (a maximum: the upper
    end); it fails when the whole interval is on the wrong side (``failure``), and is undecided otherwise, which
    fails the gate as "not enough evidence" and names ``more``: what would draw more samples. ``looked``: the looks
    that drew them, with the rates the check is designed for (shown in the report)."""
    shown = figure(estimate, scale)
    near = (estimate or {}).get("lo" if at_least else "hi")
    bound = near if near is not None else (-1.0 if at_least else float("inf"))
    undecided = None
    if outcome(estimate or {}, threshold, at_least) == "undecided":
        undecided = (f"not enough evidence: {title} is {shown}, an interval that reaches past the "
                     f"{'minimum' if at_least else 'maximum'} {threshold:g} on both sides, so the model may or may not "
                     f"meet it. {more}")
    return Check(column, title, bound, threshold, at_least, shown, failure, undecided, looked)


def more_evaluation_prompts(metrics: dict) -> str:
    """What draws more samples for the recommended configuration's alignment (its looks: ``sequential_rate``)."""
    looked = (metrics.get("evidence") or {}).get("model_alignment") or {}
    return (f"{looked.get('rounds', 1)} look(s) of {looked.get('max_rounds', 1)} took it to {looked.get('n', 0)} "
            f"evaluation prompts: allow more looks with {how_to_set('evaluate', 'max_rounds')}, or start from more "
            f"prompts with {how_to_set('evaluate', 'eval_prompts')}.")


def alignment_checks(metrics: dict, t: EvaluationGateThresholds, content: tuple[str, str],
                     model: tuple[str, str]) -> list[Check]:
    """Gate 5's two alignment checks, on evidence, as every workload words them: ``content`` and ``model`` are
    (title, failure) of the day's content's and of the recommended configuration's, the failure a template with
    ``{figure}`` (the figure, its interval and sample) and ``{minimum}``. A device class whose recommendation is
    another variant (``recommended_by_device``) has its own model check: what a GPU worker will serve meets the
    minimum as the CPU's does."""
    day, model_figure = content_alignment(metrics), metrics["intervals"].get("model_alignment")
    by_device = metrics["intervals"].get("model_alignment_by_device") or {}
    return [*reviewer_checks(metrics, t), *calibrated_checks(metrics, t, model),
        evidence_check("content_alignment", content[0], day, t.min_alignment,
                       content[1].format(figure=figure(day), minimum=f"{t.min_alignment:g}"),
                       more=more_day_answers(metrics), looked=looks(metrics, "content_alignment")),
        evidence_check("model_alignment", model[0], model_figure, t.min_alignment,
                       model[1].format(figure=figure(model_figure), minimum=f"{t.min_alignment:g}"),
                       more=more_evaluation_prompts(metrics), looked=looks(metrics, "model_alignment")),
        *(evidence_check(f"model_alignment_{column_part(cls)}", f"{model[0]}, as recommended on {cls}",
                         estimate, t.min_alignment,
                         model[1].format(figure=figure(estimate), minimum=f"{t.min_alignment:g}"),
                         more=more_evaluation_prompts(metrics),
                         looked=((metrics.get("evidence") or {}).get("model_alignment_by_device") or {}).get(cls))
          for cls, estimate in sorted(by_device.items())),
    ]


def column_part(name: str) -> str:
    """A class's or an attribute's name as part of a gate column: lower-case, runs of other characters as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def reviewer_checks(metrics: dict, t: EvaluationGateThresholds) -> list[Check]:
    """Where reviewers labelled outputs (``metrics["review"]``: ``aigc.evaluate.review.agreement``), the checker's
    agreement with them, overall and per attribute, against ``min_checker_agreement``: failed only when shown below
    it (the interval's upper end), since a few labels say little; the labels are the judge's judge."""
    review = metrics.get("review") or {}
    if not t.min_checker_agreement or not review.get("human_agreement_interval"):
        return []
    per_attribute = (review.get("by_attribute") or {}).items()
    found = [("", "", review["human_agreement_interval"]),
             *((f"_{column_part(a)}", f" on {a}", v) for a, v in per_attribute)]
    checks, columns = [], set()
    for suffix, what, estimate in found:
        column = f"checker_agreement{suffix}"
        while column in columns:  # two attributes named alike (hand-written labels): each its own column
            column += "_"
        columns.add(column)
        shown = figure(estimate)
        checks.append(Check(column, f"the checker's agreement with reviewers{what}",
                            estimate["hi"] if estimate.get("hi") is not None else 1.0, t.min_checker_agreement, True,
                            shown, f"reviewers' labels disagree with the checker{what}: it agrees on {shown}, shown "
                            f"below {t.min_checker_agreement:g}, so its verdicts cannot decide promotion; recalibrate "
                            f"the checker or check the labels ({how_to_set('evaluate_gate', 'min_checker_agreement')} "
                            f"sets the bar, 0 turns it off)"))
    return checks


def calibrated_checks(metrics: dict, t: EvaluationGateThresholds, model: tuple[str, str]) -> list[Check]:
    """Where reviewers labelled randomly drawn outputs, the recommended configuration's alignment corrected by the
    checker's measured sensitivity and specificity (``aigc.evaluate.review.calibrated``) against the minimum: failed
    only when its interval is shown below it (the correction's interval holds the rates' uncertainty too, so a few
    labels pass), never a silent change of the checker's own figure, which keeps its check."""
    estimate = metrics["intervals"].get("model_alignment_calibrated")
    if not t.calibrate_alignment or not estimate or estimate.get("value") is None:
        return []
    shown = figure(estimate)
    rates = (metrics.get("review") or {}).get("checker_rates") or {}
    said = ", ".join(f"{r} {figure(rates[r])}" for r in ("sensitivity", "specificity") if rates.get(r))
    return [Check("model_alignment_calibrated", f"{model[0]}, corrected by reviewers' labels", estimate["hi"],
                  t.min_alignment, True, shown,
                  f"corrected by the checker's mistakes that reviewers found in {estimate['labels']} randomly drawn "
                  f"outputs ({said}), the alignment is {shown}, shown below the minimum {t.min_alignment:g}: the "
                  f"checker overrates this model ({how_to_set('evaluate_gate', 'calibrate_alignment')} turns the "
                  f"correction off)")]


def looks(metrics: dict, check: str) -> dict | None:
    """The looks a check's samples were drawn in, and its designed rates (``metrics["evidence"]``)."""
    return (metrics.get("evidence") or {}).get(check)


def content_alignment(metrics: dict) -> dict | None:
    """The day's content's alignment as gate 5 decides it: after its looks (the day's answers, then its prompts
    again with new seeds), else the day's answers alone (a run written before the looks)."""
    return metrics["intervals"].get("content_alignment") or metrics["intervals"].get("alignment")


def more_day_answers(metrics: dict) -> str:
    """What draws more samples for the day's content's alignment."""
    looked = (metrics.get("evidence") or {}).get("content_alignment") or {}
    return (f"{looked.get('rounds', 1)} look(s) of {looked.get('max_rounds', 1)} took it to {looked.get('n', 0)} "
            f"answers to the day's {metrics.get('generated', 0)} prompts (the day's own, then the same prompts with "
            f"new seeds): allow more looks with {how_to_set('evaluate', 'max_rounds')}, or answer more prompts a day "
            f"({how_to_set('generate', 'prompts')} for the demo set).")


def figure(estimate: dict | None, scale: str = "{:.3f}") -> str:
    """'0.864 (95 % interval 0.836–0.888, n = 648)'."""
    if not estimate or estimate.get("value") is None:
        return f"not measurable (n = {estimate['n'] if estimate else 0})"
    if estimate.get("lo") is None:
        return f"{scale.format(estimate['value'])} (n = {estimate['n']})"
    return (f"{scale.format(estimate['value'])} ({estimate['confidence'] * 100:.3g}% interval "
            f"{scale.format(estimate['lo'])}–{scale.format(estimate['hi'])}, n = {estimate['n']})")


def promotion(metrics: dict, t: EvaluationGateThresholds) -> dict:
    """Whether ``production`` moves to the evaluated version, and why, in words: only on evidence.

    Non-inferiority on the evaluation set (same prompts and seeds, fp32 against fp32): the candidate moves
    ``production`` only when the upper end of the paired interval production − candidate is below
    ``max_regression``, and it is not significantly worse than ``best`` (the best version that was ever production,
    measured on the same prompts): a candidate equal to production within the noise of too few prompts is not
    promoted on the absence of evidence, and a chain of slightly worse candidates cannot walk production down. The
    first version that passes gate 5 is promoted. A candidate that clears gate 5 but is not promoted is not a
    failure of the run: its content is published, and production stays (champion and challenger). ``best``: whether
    the candidate measured at least as good as ``best`` (it becomes ``best`` when promoted).
    """
    version, production, best = metrics["version"], metrics.get("production_before"), metrics.get("best_before")
    regression = metrics["intervals"].get("regression_vs_production")
    to_best = metrics["intervals"].get("regression_vs_best") or regression
    if not production:
        return {"promote": True, "best": True, "regression": None,
                "reason": "no production model yet: the first version that passes gate 5 is promoted"}
    if production == version:
        return {"promote": True, "best": False, "regression": None, "reason": f"{version} is production already"}
    stays = (f"{version}'s content passed gate 5 and is published; to promote it anyway, promote it by hand with "
             f"`aigc registry promote --version {version}`")
    if not regression or regression.get("hi") is None:
        return {"promote": False, "best": False, "regression": regression, "reason": (
            f"production {production} stays: {version} could not be compared with it on the evaluation prompts "
            f"({figure(regression)}). {stays}")}
    shown, more = figure(regression), how_to_set("evaluate", "eval_prompts")
    is_best = to_best.get("value") is not None and to_best["value"] <= 0
    if regression["lo"] > t.max_regression:
        return {"promote": False, "best": False, "regression": regression, "reason": (
            f"production {production} stays: on the same {regression['n']} prompts and seeds it beats {version} "
            f"by {shown} alignment (fp32 against fp32), significantly more than the allowed {t.max_regression:g}. "
            f"To allow such a loss, raise {how_to_set('evaluate_gate', 'max_regression')}; {stays}")}
    if to_best.get("lo") is not None and to_best["lo"] > 0:
        return {"promote": False, "best": False, "regression": regression, "reason": (
            f"production {production} stays: {version} is significantly worse than {best or production}, the best "
            f"version that was production (by {figure(to_best)} alignment on the same prompts and seeds), so "
            f"promoting it would move production down. {stays}")}
    if regression["hi"] < t.max_regression:
        return {"promote": True, "best": is_best, "regression": regression, "reason": (
            f"{version} replaces production {production}: it is no worse by more than {t.max_regression:g}, with "
            f"evidence (production − {version}: {shown}, whose upper end is below {t.max_regression:g})")}
    return {"promote": False, "best": False, "regression": regression, "reason": (
        f"production {production} stays: not enough evidence that {version} is no worse by more than "
        f"{t.max_regression:g} (production − {version}: {shown}, whose upper end is not below "
        f"{t.max_regression:g}); more evaluation prompts narrow the interval (raise {more}). {stays}")}


def validate_evaluation(lake: Lake, evaluated: dict, cfg: PipelineConfig, workload: Workload) -> dict:
    """Gate 5 on an evaluation run, by ``workload``'s checks (``Workload.evaluation_checks``)."""
    import great_expectations.expectations as gxe

    prefix = evaluation_prefix(evaluated["model"], evaluated["date"], evaluated["run_id"])
    metrics = lake.get_json(join(prefix, "metrics.json"))
    judged = workload.evaluation_checks(metrics, cfg)
    row = pd.DataFrame([{c.column: c.bound for c in judged}])
    expectations = [gxe.ExpectColumnValuesToBeBetween(column=c.column, min_value=c.threshold) if c.at_least else
                    gxe.ExpectColumnValuesToBeBetween(column=c.column, max_value=c.threshold) for c in judged]
    table = Table("metrics", row, expectations, explain={c.column: c.explanation or c.failure for c in judged})
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
    4. one compare-and-swap on the aliases that moves ``production`` (and ``best``) on evidence that the version
       is no worse (``promotion``) and records the decision.

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
    verdict = ({"recommended": evaluated["recommended"],
                "recommended_by_device": metrics.get("recommended_by_device") or {}} if decision["promote"]
               else {"not_promoted": {"date": date, "reason": decision["reason"]}})
    registry.update_record(version, evaluation={"date": date, "run": prefix, "generation_run": generation_run},
                           **verdict)
    evaluation = publish(lake, partition("evaluations", model, date), run_id, report="report.html",
                         generations=generation_run)
    reason = (f"gate 5 passed for {date}: alignment {evaluated['alignment']:.3f}, recommended "
              f"{evaluated['recommended']['variant'] if evaluated['recommended'] else 'fp32'}; {decision['reason']}")
    aliases = registry.decide(version, promote=decision["promote"], reason=reason if decision["promote"]
                              else decision["reason"], evaluation=prefix, date=date, best=decision.get("best", False))
    return {"stage": "publish", "date": date, "promoted": decision["promote"],
            "promotion": decision["reason"], "production": aliases["aliases"].get("production"),
            "previous": aliases["aliases"].get("previous"), "recommended": evaluated["recommended"],
            "generations_uri": lake.url(generation_run),
            "report_uri": lake.url(join(evaluation["run_prefix"], "report.html"))}
