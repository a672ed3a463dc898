"""The evaluation report: one self-contained HTML page per run, its images copied beside it."""

from __future__ import annotations

import html
import json

from aigc.lake import Lake
from aigc.lake.keys import join


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, dict | list) else str(v)


def write_report(lake: Lake, prefix: str, metrics: dict, points: list[dict], front: list[dict], record: dict,
                 generation: dict) -> str:
    from aigc.generate.run import generation_prefix

    gallery_src = join(generation_prefix(generation["model"], generation["date"], generation["run_id"]), "gallery.png")
    if lake.exists(gallery_src):
        lake.put_bytes(join(prefix, "gallery.png"), lake.get_bytes(gallery_src))
    loss_src = record.get("files", {}).get("loss.png") and join("models", record["model"], record["version"],
                                                                "loss.png")
    if loss_src and lake.exists(loss_src):
        lake.put_bytes(join(prefix, "loss.png"), lake.get_bytes(loss_src))
    summary = [{"metric": k, "value": metrics[k]} for k in (
        "version", "generated", "refused", "safety_violations", "fid", "diversity", "regression_vs_production")]
    alignment = [{"attribute": a, "generated": metrics["alignment"][a],
                  "checker on real": metrics["checker_accuracy"][a]} for a in metrics["alignment"]]
    gates = metrics.get("gates", {})
    title = f"Evaluation of {metrics['model']} {metrics['version']} — {metrics['date']}"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}img{{max-width:100%;image-rendering:pixelated}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<h2>Alignment (all attributes correct, and per attribute)</h2>{_table(alignment)}
<p>{html.escape(metrics['fid_note'])}.</p>
<h2>Summary</h2>{_table(summary)}
<h2>Pareto front: quality against cost</h2><img src="pareto.png" alt="Pareto plot">
<p>Recommended: {html.escape(_fmt(metrics['recommended']))}</p>
<h3>Front</h3>{_table(front)}<h3>Grid</h3>{_table(points)}
<h2>Gallery</h2><img src="gallery.png" alt="gallery">
<h2>Training loss</h2><img src="loss.png" alt="loss curve">
<h2>Human review</h2><p>{metrics['review']['queued']} least certain outputs in <code>review/queue.jsonl</code>;
labelled so far: {metrics['review']['labelled']}, checker–human agreement {metrics['review']['human_agreement']}.</p>
<h2>Gates</h2><pre>{html.escape(json.dumps(gates, indent=2))}</pre>
<h2>Lineage</h2><pre>{html.escape(json.dumps(record.get('lineage', {}), indent=2))}</pre>
</body></html>"""
    key = join(prefix, "report.html")
    lake.put_bytes(key, page.encode())
    return key
