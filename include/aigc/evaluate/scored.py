"""Stage 5 for a workload that brings a checker: each output judged right or wrong (``Workload.score``) on the
day's content and on its fixed evaluation prompts (``Workload.eval_prompts``); the core's skeleton
(``aigc.evaluate.stage``) does the rest with the same rules as every workload.
"""

from __future__ import annotations

import html
import json

from aigc.evaluate.stage import Judge, Judged
from aigc.lake.keys import join
from aigc.quality.evaluation import checks_html


class ScoredJudge(Judge):
    """The default ``Workload.judge``: ``score(prompt, row)`` on ``output_row`` of each output."""

    def _judged(self, prompts: list[str], rows: list[dict]) -> Judged:
        verdicts = [bool(self.workload.score(p, r)) for p, r in zip(prompts, rows, strict=True)]
        return Judged.of(verdicts, self.cfg.evaluate.confidence)

    def content(self, generated):
        return self._judged([r["prompt"] for r in generated], generated)

    def eval_prompts(self, n):
        seed = self.cfg.evaluate.seed
        return [{"prompt": p, "seed": seed + i} for i, p in enumerate(self.workload.eval_prompts(n, seed))]

    def judge(self, serving, prompts):
        outputs = serving.generate([p["prompt"] for p in prompts], [p["seed"] for p in prompts])
        return self._judged([p["prompt"] for p in prompts], [self.workload.output_row(o) for o in outputs])


def write_scored_report(lake, prefix: str, metrics: dict, points: list[dict]) -> str:
    gate = metrics.get("gates", {}).get("evaluation") or {}
    checks = checks_html(gate.get("checks", []))
    grid = "".join(f"<tr><td>{p['variant']}</td><td>{p['policy']}</td><td>{p['alignment']:.3f}</td>"
                   f"<td>{p['latency_ms']:.3f}</td></tr>" for p in points)
    title = html.escape(f"{metrics['model']} {metrics['version']}, {metrics['date']}")
    page = (f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>Judged right: {html.escape(json.dumps(metrics['intervals']['alignment']))}</p>"
            f"<h2>Gate 5</h2>{checks}<h2>Grid</h2><table><tr><th>variant</th><th>policy</th>"
            f"<th>right</th><th>ms per prompt</th></tr>{grid}</table></body></html>")
    lake.put_bytes(join(prefix, "report.html"), page.encode())
    return join(prefix, "report.html")


def scored_checks(metrics: dict, t) -> list:
    """Gate 5 on a scored evaluation: the day's content and the recommended configuration judged right often
    enough (on evidence: the interval's lower end clears ``min_alignment``), and no safety violation."""
    from aigc.config.form import how_to_set
    from aigc.quality.evaluation import Check, alignment_checks

    lower = f"lower {how_to_set('evaluate_gate', 'min_alignment')}"
    return [
        *alignment_checks(metrics, t, (
            "the day's content judged right",
            "the checker judges {figure} of the day's outputs right, significantly below the minimum {minimum}. "
            f"Train longer ({how_to_set('train', 'steps')}); or {lower}."), (
            "the recommended configuration judged right on the evaluation prompts",
            "the recommended configuration is judged right on {figure} of the fixed evaluation prompts, "
            f"significantly below the minimum {{minimum}}; or {lower}.")),
        Check("safety_violations", "outputs for prompts with blocked terms", float(metrics["safety_violations"]),
              0.0, False, str(metrics["safety_violations"]),
              f"{metrics['safety_violations']} output(s) answered prompts with blocked terms, where the maximum is 0; "
              "this check has no threshold to change."),
    ]
