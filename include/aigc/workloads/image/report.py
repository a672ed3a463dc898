"""The evaluation report: one self-contained HTML page per run, its images copied beside it.

It opens with gate 5's verdict: each check in plain words with the figure, its interval and
sample size, and for a failed one what it means and which field changes it. Then the figures,
the Pareto grid and its rule, the gallery, the loss curve, review and lineage.
"""

from __future__ import annotations

import html
import json

from aigc.evaluate.review import calibration_text, training_labels_text
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.quality.evaluation import by_device_html, figure, gpu_html

_STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
img{max-width:100%;image-rendering:pixelated}.verdict{padding:1em;border-radius:6px;margin:1em 0}
.pass{background:#e6f4ea;border:1px solid #34a853}.fail{background:#fce8e6;border:1px solid #d93025}
.pending{background:#f1f3f4;border:1px solid #999}"""


def _agreement(review: dict) -> str:
    """The checker's agreement with reviewers, with its interval, and per attribute where reviewers judged them."""
    overall = figure(review.get("human_agreement_interval")) if review.get("human_agreement_interval") else \
        str(review.get("human_agreement"))
    per = "; ".join(f"{html.escape(a)} {figure(v)}" for a, v in (review.get("by_attribute") or {}).items())
    return overall + (f" (per attribute: {per})" if per else "")


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def interval_text(e: dict | None, digits: int = 3) -> str:
    """'0.850 [0.821, 0.876] n=648' for an Estimate dict; '—' when there is none."""
    if not e or e.get("value") is None:
        return "—" if not e else f"— (n={e.get('n', 0)})"
    if e.get("lo") is None:
        return f"{e['value']:.{digits}f} (n={e['n']})"
    return f"{e['value']:.{digits}f} [{e['lo']:.{digits}f}, {e['hi']:.{digits}f}] n={e['n']}"


def _fmt(v) -> str:
    if isinstance(v, dict) and {"value", "lo", "hi", "n"} <= set(v):
        return interval_text(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else str(v)


def _verdict(metrics: dict) -> str:
    gate = metrics.get("gates", {}).get("evaluation")
    if gate is None:
        return ('<div class="verdict pending"><strong>Gate 5 has not judged this run yet</strong> '
                "(aigc evaluate --no-gate, or the gate task has not run).</div>")
    checks = gate.get("checks", [])
    failed = [c for c in checks if not c["passed"]]
    if gate["success"]:
        promotion = metrics.get("promotion") or {}
        moved = "Promoted" if promotion.get("promote", True) else "Not promoted"
        return (f'<div class="verdict pass"><strong>Gate 5 PASSED</strong>: all {len(checks)} checks hold, and the '
                f"day's content is published. <strong>{moved}</strong>: {html.escape(promotion.get('reason', ''))}"
                "</div>")
    reasons = "".join(f"<li><strong>{html.escape(c['title'])}</strong>: {html.escape(c['explanation'])}</li>"
                      for c in failed) or "".join(f"<li>{html.escape(f)}</li>" for f in gate["failures"])
    return (f'<div class="verdict fail"><strong>Gate 5 FAILED</strong> {len(failed) or len(gate["failures"])} of '
            f"{len(checks)} check(s); nothing was promoted or published.<ul>{reasons}</ul></div>")


def _gallery(lake: Lake, prefix: str, generation: dict) -> str:
    from aigc.generate.run import generation_prefix

    src = generation_prefix(generation["model"], generation["date"], generation["run_id"])
    if lake.exists(join(src, "gallery.png")):
        lake.put_bytes(join(prefix, "gallery.png"), lake.get_bytes(join(src, "gallery.png")))
    return '<img src="gallery.png" alt="gallery: each image with its prompt">'


POINT_FIGURES = {"fid": "Fréchet distance (checker features)", "clip_score": "CLIP score",
                 "feature_fid": "Fréchet distance (feature model)"}
"""Figures a grid point may carry beside its alignment (``Judged.point``), and their columns in the grid."""


def _scorers(metrics: dict) -> str:
    """The scorers that need no caption grammar (the hf-diffusion workload's), and those not configured."""
    if "judged_by" not in metrics:
        return ""
    iv = metrics.get("intervals", {})
    rows = [{"figure": name, "value": value} for name, value in (
        ("alignment judged by", metrics["judged_by"]), ("CLIP score (100 · cos, mean)", iv.get("clip_score")),
        ("CLIP verdict rate (own caption beats the distractors)", iv.get("clip_verdict_rate")),
        ("Fréchet distance (feature model)", iv.get("feature_fid")), ("KID (feature model)", metrics.get("kid")),
        ("unsafe images (safety classifier)", metrics.get("unsafe_images"))) if value is not None]
    rows += [{"figure": key, "value": note} for key, note in sorted((metrics.get("unscored") or {}).items())]
    return f"<h2>Scorers</h2>{_table(rows)}"


def write_report(lake: Lake, prefix: str, metrics: dict, points: list[dict], front: list[dict], record: dict,
                 generation: dict) -> str:
    loss_src = record.get("files", {}).get("loss.png") and join("models", record["model"], record["version"],
                                                                "loss.png")
    if loss_src and lake.exists(loss_src):
        lake.put_bytes(join(prefix, "loss.png"), lake.get_bytes(loss_src))
    iv = metrics.get("intervals", {})
    gate = metrics.get("gates", {}).get("evaluation") or {}
    checks = [{"check": c["title"], "observed": c["observed"], "threshold": c["threshold"],
               "outcome": c.get("outcome", "pass" if c["passed"] else "fail"), "looks": c.get("looks", "1"),
               "designed for": c.get("designed") or ""} for c in gate.get("checks", [])]
    summary = [{"figure": name, "value": value} for name, value in (
        ("version", metrics["version"]), ("day's content: alignment (all attributes)", iv.get("alignment")),
        ("recommended configuration on the evaluation set", iv.get("model_alignment")),
        ("evaluation prompts", metrics.get("eval_prompts")), ("generated", metrics["generated"]),
        ("refused", metrics["refused"]), ("safety violations", metrics["safety_violations"]),
        ("Fréchet distance", iv.get("fid")), ("diversity", metrics.get("diversity")),
        ("production before", metrics.get("production_before")),
        ("regression vs production (production − candidate)", iv.get("regression_vs_production")))]
    alignment = [{"attribute": a, "generated (day's content)": metrics["alignment"][a],
                  "checker on its reference set": (metrics.get("checker_accuracy") or {}).get(a),
                  "checker on the day's real images": (metrics.get("checker_accuracy_real") or {}).get(a)}
                 for a in metrics["alignment"]]
    grid = [{"variant": p["variant"], "policy": p["policy"], "alignment": p.get("alignment_ci"),
             "vs best (best − it)": p.get("vs_best"), "as good as the best": p.get("as_good"),
             "ms/sample (fastest round)": p["latency_ms"], "ms range over rounds": p.get("latency_range_ms"),
             "latency tie": p.get("cost_tie"), "bytes": p.get("size_bytes"),
             **{label: p[k] for k, label in POINT_FIGURES.items() if k in p}} for p in points]
    if metrics.get("score_name"):  # the recommendation's second axis (``Judge.score_epsilon``)
        for row, p in zip(grid, points, strict=True):
            row[f"{metrics['score_name']}: best − it"] = p.get("score_vs_best")
    rec = metrics.get("recommended")
    title = f"Evaluation of {metrics['model']} {metrics['version']} — {metrics['date']}"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
{_verdict(metrics)}
<h2>Gate 5 checks</h2>{_table(checks) if checks else "<p>not judged yet</p>"}
<p>Intervals are {html.escape(str(round(100 * (iv.get('alignment') or {}).get('confidence', 0.95))))} %; a check
fails only when its whole interval is on the wrong side of the threshold.</p>
<h2>Summary</h2>{_table(summary)}
<h2>Alignment per attribute</h2>{_table(alignment)}
<p>{html.escape(metrics['fid_note'] + '.' if 'fid_note' in metrics else '')}</p>
{_scorers(metrics)}
<h2>Pareto front: quality against cost</h2><img src="pareto.png" alt="Pareto plot">
<p>Recommended: <strong>{html.escape(f"{rec['variant']} / {rec['policy']}" if rec else "none")}</strong>
({html.escape(_fmt(rec.get('latency_ms')) if rec else "")} ms per sample). Rule: {html.escape(
        metrics.get('recommendation_rule', ''))}</p>
<h3>Grid</h3>{_table(grid)}<h3>Front</h3>{_table([{k: p[k] for k in ("variant", "policy", "alignment", "latency_ms")}
                                                 for p in front])}
<h2>Gallery</h2>{_gallery(lake, prefix, generation)}
{by_device_html(metrics)}
{gpu_html(metrics)}
<h2>Training loss</h2><img src="loss.png" alt="loss curve">
<h2>Human review</h2><p>{metrics['review']['queued']} outputs ({html.escape(metrics['review'].get('selection') or
'uncertain')}) in <code>review/queue.jsonl</code>; labelled so far: {metrics['review']['labelled']},
checker–human agreement {_agreement(metrics['review'])}. Labels in this version's training: {html.escape(
    training_labels_text(metrics['review'].get('used_in_training')))}. The checker's mistakes: {html.escape(
    calibration_text(metrics['review'].get('checker_rates'), metrics['intervals'].get('model_alignment_calibrated')))}.
</p>
<h2>Gate details</h2><pre>{html.escape(json.dumps(gate.get('failures', []), indent=2, ensure_ascii=False))}</pre>
<p>{html.escape(gate.get('result_uri', ''))}</p>
<h2>Lineage</h2><pre>{html.escape(json.dumps(record.get('lineage', {}), indent=2, ensure_ascii=False))}</pre>
</body></html>"""
    key = join(prefix, "report.html")
    lake.put_bytes(key, page.encode())
    return key
