"""The view's pages, from the catalog's plain data (``aigc.catalog``) to HTML bodies.

Each function returns (title, body); ``markup.layout`` wraps them. Images and reports are links
to ``/aigc/lake/<key>`` (files.py), so a page never embeds lake bytes itself.
"""

from __future__ import annotations

from aigc.catalog import DEPLOY_GATE, STAGES, gate_5_verdict
from aigc.evaluate.review import training_labels_text
from aigc.telemetry import figures_shown
from aigc_airflow.view.markup import Html, Urls, badge, bullet_list, concat, esc, key_value, link, table, tag

# The pipeline's order, with gate 3 (deploy: it judges a registry version) between training and generation.
COLUMNS = [(s.name, s.gate) for s in STAGES]
COLUMNS.insert(2, ("registry", DEPLOY_GATE))
TITLES = {"curated": "1 · Curated data", "training": "2 · Training", "registry": "3 · Registry (deploy)",
          "generations": "4 · Generations", "evaluations": "5 · Evaluation"}


def runs_page(runs: list[dict], urls: Urls) -> tuple[str, Html]:
    rows = []
    for day in runs:
        row = {"date": link(urls.page("dates", day["date"]), day["date"])}
        for stage, gate in COLUMNS:
            row[stage] = _stage_cell(day["published"].get(stage), day["gates"][gate], stage != "registry")
        rows.append(row)
    intro = tag("p", "Each stage's published run and its gate verdict; runs that were judged but not "
                     "published are listed with the expectations they failed.", class_="muted")
    return "AIGC runs by date", concat([intro, table(rows, empty="The lake has no partitions yet.")])


def _stage_cell(published: dict | None, verdicts: list[dict], publishes: bool) -> Html:
    lines = []
    published_id = published["run_id"] if published else None
    if publishes:
        verdict = next((v for v in verdicts if v["run_id"] == published_id), None)
        lines.append(concat(["published ", tag("code", published_id), " ", badge(verdict and verdict["success"])])
                     if published else tag("span", "not published", class_="muted"))
    for v in verdicts:
        if v["run_id"] != published_id:
            lines.append(concat([tag("code", v["run_id"]), " ", badge(v["success"]), bullet_list(v["failures"])]))
    return concat(tag("div", line) for line in lines)


def day_page(day: dict, urls: Urls) -> tuple[str, Html]:
    sections = []
    for stage, gate in COLUMNS:
        published = day["published"].get(stage)
        details = _registry_of_day(day) if stage == "registry" else (
            _DETAILS[stage](published, urls) if published else tag("p", "Nothing published.", class_="muted"))
        latest = day.get("evaluation")
        if stage == "evaluations" and latest and not latest["published"]:
            details = concat([details, _unpublished_evaluation(latest, urls)])
        sections += [tag("h2", TITLES[stage]), details, tag("h3", f"Gate: {gate}"),
                     _verdicts(day["gates"][gate], published and published["run_id"], urls)]
    return f"AIGC run of {day['date']}", concat(sections)


def _verdicts(verdicts: list[dict], published_id: str | None, urls: Urls) -> Html:
    return table([{"run": tag("code", v["run_id"]), "verdict": badge(v["success"]),
                   "published": "yes" if v["run_id"] == published_id else "",
                   "failed expectations (observed)": bullet_list(v["failures"]),
                   "details": concat([link(urls.lake(v["result_key"]), "result.json"), " · ",
                                      link(urls.lake(v["data_docs_key"]), "Data Docs")])}
                  for v in verdicts], empty="The gate has not run for this date.")


def _curated(run: dict, urls: Urls) -> Html:
    m = run["summary"]
    facts = key_value({"run": tag("code", run["run_id"]), "published at": run["published_at"],
                       "input records": m["input_records"], "curated rows": m["rows"],
                       "quarantined": sum(m["quarantined"].values()), "shards": len(m["shards"]),
                       "bytes": m.get("bytes")})
    reasons = table([{"reason": r, "records": n} for r, n in m["quarantined"].items()], empty="nothing quarantined")
    return concat([facts, tag("h3", "Quarantine by reason"), reasons])


def _training(run: dict, urls: Urls) -> Html:
    s = run["summary"]
    facts = key_value({"run": tag("code", run["run_id"]), "published at": run["published_at"],
                       "final validation loss": s["final_val_loss"], "initial validation loss": s["initial_val_loss"],
                       "optimizer steps": s["steps"], "processes": s["world_size"], "precision": s.get("precision"),
                       "shard imbalance": s.get("imbalance"), "seconds": s.get("seconds"),
                       **figures_shown(s.get("gpu"))})
    return concat([facts, urls.image(f"{run['run_prefix']}/loss.png", "training loss curve")])


def _generations(run: dict, urls: Urls) -> Html:
    m = run["summary"]
    facts = key_value({"run": tag("code", run["run_id"]), "published at": run["published_at"],
                       "model": f"{m['version']} {m['variant']}", "prompts": m["rows"], "generated": m["generated"],
                       "refused": m["refused"], "from cache": m["cached"], **figures_shown(m.get("gpu"))})
    return concat([facts, urls.image(f"{run['run_prefix']}/gallery.png", "generation gallery")])


def _evaluations(run: dict, urls: Urls) -> Html:
    return concat([_metrics(run, urls), tag("p", link(urls.lake(f"{run['run_prefix']}/report.html"),
                                                      "Open the evaluation report"))])


def _unpublished_evaluation(run: dict, urls: Urls) -> Html:
    """The newest evaluation of the date when it was not published: why (gate 5 in plain words), and its files."""
    gate = run["gate"]
    said = gate_5_verdict(None if gate is None else gate["success"], run["failed_checks"])
    verdict = {"not judged": "was not judged by gate 5", "passed": "passed gate 5 but is not published",
               "not enough evidence": "did not pass gate 5: not enough evidence yet"}.get(said, "failed gate 5")
    links = [link(urls.lake(key), name) for name, key in run["files"].items() if name != "pareto.png"]
    reasons = bullet_list([f"{c['title']}: {c['explanation']}" for c in run["failed_checks"]])
    return concat([tag("h3", concat(["Latest evaluation ", tag("code", run["run_id"]), f" {verdict} ",
                                     badge(gate and gate["success"])])),
                   reasons, tag("p", concat(["Open: ", concat(links, " · ")])),
                   _metrics({**run, "published_at": None}, urls)])


def _metrics(run: dict, urls: Urls) -> Html:
    m = run["summary"]
    return key_value({"run": tag("code", run["run_id"]), "published at": run["published_at"],
                      "model": m["version"], "alignment (all attributes)": m["alignment"]["all"],
                      "checker accuracy (reference set)": m["checker_accuracy"]["all"],
                      "checker accuracy (the day's real images)": (m.get("checker_accuracy_real") or {}).get("all"),
                      "FID (checker features)": m["fid"], "diversity": m.get("diversity"),
                      "safety violations": m["safety_violations"],
                      "regression vs production": m.get("regression_vs_production"),
                      "recommended": _recommended(m.get("recommended")),
                      # What ``auto`` serves on each device class the variants were timed on.
                      **{f"recommended on {cls}": _recommended(rec)
                         for cls, rec in sorted((m.get("recommended_by_device") or {}).items())},
                      "review labels": _labels(m.get("review")),
                      "labels in its training": training_labels_text((m.get("review") or {}).get("used_in_training"))})


def _labels(review: dict | None) -> str:
    """How many outputs reviewers labelled and how often the checker agreed with them."""
    if not review or not review.get("labelled"):
        return "none yet"
    per = ", ".join(f"{a} {v['value']:.2f}" for a, v in (review.get("by_attribute") or {}).items())
    return (f"{review['labelled']} labelled, checker agrees on {review['human_agreement']:.2f}"
            + (f" (per attribute: {per})" if per else ""))


def _recommended(rec: dict | None) -> str:
    return f"{rec['variant']} / {rec['policy']} ({rec['latency_ms']} ms per sample)" if rec else "—"


def _registry_of_day(day: dict) -> Html:
    if not day["versions"]:
        return tag("p", "No version registered from this date.", class_="muted")
    return concat(_version_block(v) for v in day["versions"])


def _version_block(v: dict) -> Html:
    title = concat([tag("strong", v["version"]), " ", esc(", ".join(v["aliases"]) or "no alias"),
                    " · registered ", esc(v["registered_at"])])
    # Agreement with fp32 is the workload's own figure: pixel MAE for images, the share of fp32's text reproduced.
    variants = table([{"variant": name, "size (bytes)": x["size_bytes"], "latency b1 (ms)": x["latency_ms_b1"],
                       **({"pixel MAE vs fp32": x["pixel_mae_vs_fp32"]} if x.get("pixel_mae_vs_fp32") is not None else
                          {"agreement vs fp32": x.get("agreement_vs_fp32")}),
                       "eligible": _eligible(x["eligible"])}
                      for name, x in v["variants"].items()], empty="no variants built yet")
    return concat([tag("p", title), variants])


def _names(names: list[str] | None) -> str:
    return "not judged" if names is None else ", ".join(names) or "none"


def _eligible(flag: bool | None) -> str:
    return "not judged" if flag is None else "yes" if flag else "no"


_DETAILS = {"curated": _curated, "training": _training, "generations": _generations, "evaluations": _evaluations}


def registry_page(registry: dict, urls: Urls) -> tuple[str, Html]:
    aliases = table([{"alias": a, "version": v} for a, v in sorted(registry["aliases"].items())],
                    empty="no aliases yet")
    versions = table([{"version": v["version"], "date": link(urls.page("dates", v["date"]), v["date"]),
                       "aliases": ", ".join(v["aliases"]), "final val loss": v["training"].get("final_val_loss"),
                       "steps": v["training"].get("steps"), "eligible variants": _names(v["eligible_variants"]),
                       "recommended": _recommended(v["recommended"])}
                      for v in reversed(registry["versions"])], empty="no versions registered")
    history = table([{k: h.get(k) for k in ("at", "alias", "from", "to", "reason")}
                     for h in reversed(registry["history"])], empty="no alias moves yet")
    details = concat(_version_block(v) for v in reversed(registry["versions"]))
    return f"Model registry: {registry['model']}", concat([
        tag("h2", "Aliases"), aliases, tag("h2", "Versions (newest first)"), versions,
        tag("h2", "Alias history (newest first)"), history, tag("h2", "Variants and their eligibility (gate 3)"),
        details])


def latest_page(latest: dict | None, urls: Urls) -> tuple[str, Html]:
    if latest is None:
        return "Latest evaluation report", tag("p", "No evaluation has been published yet.", class_="muted")
    m, files = latest["summary"], latest["files"]
    per_attribute = table([{"attribute": a, "generated": m["alignment"][a],
                            "checker (reference set)": m["checker_accuracy"].get(a),
                            "checker (real images)": (m.get("checker_accuracy_real") or {}).get(a)}
                           for a in m["alignment"]])
    gate = m.get("gates", {}).get("evaluation", {})
    parts = [tag("p", concat(["Date ", link(urls.page("dates", latest["date"]), latest["date"]), " · gate 5 ",
                              badge(gate.get("success")), " · ",
                              link(urls.lake(files["report.html"]), "full report") if "report.html" in files else ""])),
             _metrics(latest, urls), tag("h2", "Alignment per attribute"), per_attribute]
    if "pareto.png" in files:
        parts += [tag("h2", "Pareto front: quality against cost"), urls.image(files["pareto.png"], "Pareto plot")]
    if "gallery.png" in files:
        parts += [tag("h2", "Gallery"), urls.image(files["gallery.png"], "gallery")]
    return f"Latest evaluation report: {m['model']} {m['version']}", concat(parts)
