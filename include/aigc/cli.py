"""``aigc``: one command per job, over the same functions the Airflow tasks call.

Every command logs progress to stderr and ends with one JSON line on stdout. A failure
prints a one-line ``error:`` message (what and where), not only a traceback, and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator

from aigc.config import PipelineConfig
from aigc.lake import open_lake
from aigc.lake.keys import join, partition
from aigc.progress import emit_summary, setup_logging
from aigc.stages import configuration_of, configure
from aigc.workload import Workload
from aigc.workloads import default_workload, load_workload, workload_of

log = logging.getLogger("aigc")


def _config(args: argparse.Namespace) -> PipelineConfig:
    _check_request(args)
    if getattr(args, "config_json", None):  # a torchrun worker gets the launcher's resolved configuration
        return configuration_of(json.loads(args.config_json))
    cfg = configure(args.preset, getattr(args, "workload__name", None))
    changes: dict[str, dict] = {}
    for section in (f.name for f in dataclasses.fields(cfg)):
        fields = {f.name for f in dataclasses.fields(getattr(cfg, section))}
        for name in fields:
            value = getattr(args, f"{section}__{name}", None)
            if value is not None:
                changes.setdefault(section, {})[name] = value
    own = {k.removeprefix("settings__"): v for k, v in vars(args).items()
           if k.startswith("settings__") and v is not None}
    if own:  # the workload's own settings (Workload.cli_settings)
        changes.setdefault("workload", {})["settings"] = own
    return cfg.override(changes)


def _check_request(args: argparse.Namespace) -> None:
    """The trigger's check (aigc.config.access), with the operator's policy: whoever runs ``aigc`` is the operator,
    so no allow-list of the deployment's applies (they bind the form, the REST API and asset events)."""
    from aigc.config.access import AccessPolicy, check_request

    values = {"workload": getattr(args, "workload__name", None), "raw_uri": getattr(args, "raw", None),
              "prompts_uri": getattr(args, "prompts_uri", None)}
    check_request({k: v for k, v in values.items() if v is not None}, AccessPolicy.operator())


def _raw_lake(args: argparse.Namespace, cfg: PipelineConfig):
    """The root the drop is read from: ``--raw``, else by ``raw.drop`` (``aigc.prepare.drop.raw_root``)."""
    from aigc.prepare.drop import raw_root

    return raw_root(open_lake(args.lake), cfg.raw.drop, cfg.raw.source, args.raw)


def cmd_make_raw(args: argparse.Namespace) -> dict:
    """A synthetic drop: under the lake's synthetic root (never a producer's), or where ``--out`` says."""
    from aigc.prepare.drop import raw_root
    from aigc.stages import PREPARE

    cfg = _config(args)
    out = args.out or args.raw
    raw = open_lake(out) if out else raw_root(open_lake(args.lake), "synthetic", cfg.raw.source)
    return {"command": "make-raw", **PREPARE.make_raw(raw, args.date, cfg)}


def cmd_prepare(args: argparse.Namespace) -> dict:
    from aigc.stages import PREPARE

    cfg = _config(args)
    lake = open_lake(args.lake)
    summary = PREPARE.produce(_raw_lake(args, cfg), lake, args.date, cfg)
    return {"command": "prepare", **summary, **_finish(PREPARE, args, lake, cfg, summary)}


def _finish(stage, args: argparse.Namespace, lake, cfg: PipelineConfig, produced: dict) -> dict:
    """Gate, then publish, as the stage's DAG does (``--no-gate``: neither)."""
    if args.no_gate:
        return {"published": False}
    done = stage.finish(lake, cfg, produced, _fence(args))
    done.pop("gate_result")
    return done


def _fence(args: argparse.Namespace) -> Callable[[], None]:
    """The date lease's fence (``holding_date``): renews it, or DateBusy if another writer took the date over."""
    return getattr(args, "fence", None) or (lambda: None)


def cmd_gate(args: argparse.Namespace) -> dict:
    from aigc.stages import PREPARE

    cfg = _config(args)
    return {"command": "gate", **PREPARE.gate(open_lake(args.lake), cfg, {"date": args.date, "run_id": args.run_id})}


def cmd_publish(args: argparse.Namespace) -> dict:
    from aigc.stages import PREPARE

    cfg = _config(args)
    _fence(args)()
    return {"command": "publish", **PREPARE.publish(open_lake(args.lake), cfg, {"date": args.date,
                                                                                "run_id": args.run_id})}


def cmd_train(args: argparse.Namespace) -> dict | None:
    """Launch torchrun (or, with --worker, be one of its processes); then gate 2 and publish."""
    cfg = _config(args)
    if args.worker:
        from aigc.train.launch import worker_main

        worker_main(args.lake, args.date, args.run_id, cfg, workload_of(cfg))
        return None  # the launcher reports
    from aigc.stages import TRAIN

    lake = open_lake(args.lake)
    summary = TRAIN.produce(lake, args.date, cfg, run_id=args.run_id, node_rank=args.node_rank)
    if args.node_rank:  # node 0 gates and publishes
        return {"command": "train", **summary, "published": False}
    return {"command": "train", **summary, **_finish(TRAIN, args, lake, cfg, summary)}


def cmd_deploy(args: argparse.Namespace) -> dict:
    """Register the date's published model (or take --version), build its variants, run gate 3."""
    from aigc.stages import DEPLOY

    cfg = _config(args)
    lake = open_lake(args.lake)
    _fence(args)()  # registering moves `candidate`
    registered = None if args.version else DEPLOY.register(lake, args.date, cfg)
    version = args.version or registered["version"]
    built = DEPLOY.build(lake, cfg, version)
    gate = DEPLOY.gate(lake, cfg, {"version": version, "date": args.date})
    return {"command": "deploy", "model": cfg.model.name, "version": version,
            "registered": registered, "variants": built["variants"], "gate": gate["result_uri"],
            "eligible_variants": gate["eligible_variants"], "not_eligible": gate["not_eligible"]}


def cmd_generate(args: argparse.Namespace) -> dict:
    """Plan, generate every shard here (the DAG maps them over workers), gate 4; publish when the model is
    production (a candidate's run is published by `aigc evaluate`, after gate 5)."""
    from aigc.generate.prompts import prompts_key_of
    from aigc.progress import progress
    from aigc.stages import GENERATE

    cfg = _config(args)
    lake = open_lake(args.lake)
    key = prompts_key_of(lake, args.prompts_uri) if args.prompts_uri else None
    plan = GENERATE.plan(lake, args.date, cfg, run_id=args.run_id, demo_prompts=args.demo_prompts, prompts_key=key,
                         model_ref=GENERATE.model_for(cfg, args.generate__model_ref, prompt_file=key is not None))
    shards = [GENERATE.shard(lake, plan, s, cfg) for s in progress(plan["shards"], desc="shards", unit="shard")]
    summary = GENERATE.finish_run(lake, plan, cfg)
    batching = [s["batching"] for s in shards if "batching" in s]
    result = {"command": "generate", **summary, "shards": len(shards),
              "ooms": sum(b["ooms"] for b in batching), "batch_sizes": [b["learned_sizes"] for b in batching],
              "memory_prediction_error": [b["memory_prediction_error"] for b in batching]}
    return {**result, **_finish(GENERATE, args, lake, cfg, summary)}


def cmd_evaluate(args: argparse.Namespace) -> dict:
    """Evaluate a generation run of the date (default: its newest), then gate 5, promote and publish."""
    from aigc.evaluate.runs import latest_generation
    from aigc.lake.publish import new_run_id
    from aigc.stages import EVALUATE

    cfg = _config(args)
    lake = open_lake(args.lake)
    generation = latest_generation(lake, cfg.model.name, args.date, args.generation_run)
    evaluated = EVALUATE.produce(lake, generation, cfg, run_id=args.run_id or new_run_id())
    return {"command": "evaluate", **evaluated, **_finish(EVALUATE, args, lake, cfg, evaluated)}


def cmd_review(args: argparse.Namespace) -> dict:
    """An evaluation run's review queue out as Label Studio tasks, or a Label Studio JSON export in as labels."""
    from aigc.evaluate import labelstudio
    from aigc.lake import key_in
    from aigc.lake.publish import resolve

    cfg = _config(args)
    lake = open_lake(args.lake)
    model = cfg.model.name
    if args.action == "export":
        run_id = args.evaluation_run or resolve(lake, partition("evaluations", model, args.date))["run_id"]
        return {"command": "review export", "model": model, "date": args.date, "run_id": run_id,
                **labelstudio.export_queue(lake, model, args.date, run_id, image_base=args.image_base)}
    if not args.export:  # every export reviewers dropped in the inbox and not imported yet
        return {"command": "review import", "model": model, **labelstudio.import_pending(lake, model)}
    return {"command": "review import", "model": model,
            **labelstudio.import_export(lake, model, key_in(lake, args.export))}


def cmd_registry(args: argparse.Namespace) -> dict:
    """List versions and aliases; promote a version to production; roll production back."""
    from aigc.registry import Registry

    cfg = _config(args)
    registry = Registry(open_lake(args.lake), cfg.model.name)
    if args.action == "lineage":
        return _lineage(registry, args.version or "production")
    if args.action == "promote":
        if not args.version:
            raise ValueError("aigc registry promote needs --version vNNNN (or an alias such as candidate)")
        doc = registry.move("production", registry.resolve(args.version), reason=args.reason or "promoted by hand")
    elif args.action == "rollback":
        doc = registry.rollback(reason=args.reason or "rolled back by hand")
    else:
        doc = registry.aliases()
    versions = [{k: v.get(k) for k in ("version", "date", "registered_at", "weights_sha256", "training")}
                | {"variants": {n: {m: e[m] for m in _VARIANT_FIGURES if m in e}
                                for n, e in v.get("variants", {}).items()},
                   "eligible_variants": (v.get("smoke_test") or {}).get("eligible_variants")}
                for v in registry.versions()]
    for v in versions:
        marks = [a for a, t in doc["aliases"].items() if t == v["version"]]
        log.info("%s %s %s variants=%s", v["version"], v["date"], f"[{', '.join(marks)}]" if marks else "",
                 ",".join(v["variants"]) or "-")
    return {"command": f"registry {args.action}", "model": cfg.model.name, "aliases": doc["aliases"],
            "history": doc["history"][-10:], "versions": versions}


def _lineage(registry, ref: str) -> dict:
    """``aigc registry lineage``: the version's chain, a line per link; exit 1 naming the links that are missing."""
    from aigc.registry.lineage import lineage

    chain = lineage(registry.lake, registry.name, ref)
    for link in chain["links"]:
        state = "ok" if link["present"] and link.get("verified") is not False else "MISSING"
        log.info("%-7s %-30s %s%s", state, link["link"], link["uri"],
                 f" (kept by {', '.join(link['kept_by'])})" if link.get("kept_by") else "")
    if not chain["complete"]:
        raise LookupError(f"{registry.name} {chain['version']}'s lineage is broken: {', '.join(chain['missing'])} "
                          "missing (each link above names what it expected)")
    return {"command": "registry lineage", **chain}


def cmd_status(args: argparse.Namespace) -> dict:
    """What is published for a date, every gate's latest verdict, and the latest evaluation (even a failed one)."""
    from aigc.catalog import Catalog

    cfg = _config(args)
    lake = open_lake(args.lake)
    catalog = Catalog(lake, cfg.prepare.dataset, cfg.model.name)
    status: dict = {"command": "status", "lake": lake.uri, "date": args.date,
                    "gates": _gate_status(catalog, args.date), "evaluation": _evaluation_status(catalog, args.date)}
    curated = catalog.published("curated", args.date)
    if curated is None:
        where = lake.url(catalog.partition("curated", args.date))
        log.info("nothing is published at %s", where)
        return {**status, "curated": None, "note": f"nothing is published at {where}"}
    manifest = curated["summary"]
    gate = catalog.gate_result("curated", args.date, curated["run_id"])
    log.info("curated %s: %d rows in %d shard(s) from %d input records; quarantined %s",
             lake.url(curated["run_prefix"]), manifest["rows"], len(manifest["shards"]),
             manifest["input_records"], manifest["quarantined"])
    if gate:
        log.info("gate 1: %s — data docs %s", "PASS" if gate["success"] else "FAIL", lake.url(gate["data_docs_key"]))
    return {**status, "run_id": curated["run_id"], "published_at": curated["published_at"],
            "curated_uri": lake.url(curated["run_prefix"]), "rows": manifest["rows"],
            "input": manifest["input_records"], "quarantined": manifest["quarantined"],
            "quarantine_uri": lake.url(manifest["quarantine"]["prefix"]),
            "gate_passed": gate["success"] if gate else None,
            "data_docs_uri": lake.url(gate["data_docs_key"]) if gate else None,
            "model": _model_status(catalog, args.date),
            "registry": _registry_status(lake, cfg.model.name),
            "generations": _generation_status(catalog, args.date)}


def _gate_status(catalog, date: str) -> dict:
    """Each gate's latest verdict of the date: passed, failed (with what failed), or not run."""
    from aigc.catalog import GATES

    out = {}
    for number, gate in enumerate(GATES, start=1):
        verdicts = catalog.gate_results(gate, date)
        if not verdicts:
            out[gate] = None
            continue
        latest = max(verdicts, key=lambda v: v["run_id"])
        out[gate] = {"passed": latest["success"], "run_id": latest["run_id"], "failures": latest["failures"],
                     "result_uri": catalog.lake.url(latest["result_key"])}
        if not latest["success"] and gate != "evaluation":  # gate 5 is explained in plain words below
            log.warning("gate %d (%s) FAILED for run %s:\n  - %s\n  results: %s", number, gate, latest["run_id"],
                        "\n  - ".join(latest["failures"]), out[gate]["result_uri"])
    return out


def _evaluation_status(catalog, date: str) -> dict | None:
    """The latest evaluation of the date, published or not: gate 5's verdict, its report and gallery."""
    from aigc.catalog import gate_5_verdict

    run = catalog.evaluation_of(date)
    if run is None:
        return None
    lake, m = catalog.lake, run["summary"]
    verdict = (m.get("gates") or {}).get("evaluation")
    files = {name.replace(".", "_") + "_uri": lake.url(key) for name, key in run["files"].items()}
    state = gate_5_verdict(None if verdict is None else verdict["success"], run["failed_checks"])
    log.info("evaluation %s of %s %s: gate 5 %s, %s; report %s; gallery %s", run["run_id"], m["model"],
             m["version"], state.upper(), "published" if run["published"] else "not published",
             files.get("report_html_uri"), files.get("gallery_png_uri"))
    for check in run["failed_checks"]:
        log.warning("gate 5: %s — %s", check["title"], check["explanation"])
    return {"run_id": run["run_id"], "version": m["version"], "published": run["published"],
            "gate_passed": None if verdict is None else verdict["success"], "gate_verdict": state,
            "failed_checks": [{k: c.get(k) for k in ("check", "outcome", "observed", "threshold", "explanation")}
                              for c in run["failed_checks"]],
            "recommended": m.get("recommended") and {k: m["recommended"][k] for k in ("variant", "policy")},
            "promotion": (m.get("promotion") or {}).get("reason"),
            **files}


def _generation_status(catalog, date: str) -> dict | None:
    """The date's published content (production's answers to a prompt file), else the generations its published
    evaluation scored (a candidate's evaluation set)."""
    run = catalog.published("generations", date)
    if run is None:
        return None
    purpose = run["purpose"]
    m = run["summary"]
    # The workload's preview (gallery.png, samples.md); a manifest written before it was recorded: an image run's.
    gallery = catalog.lake.url(join(run["run_prefix"], m.get("gallery") or "gallery.png"))
    log.info("generations (%s): %d prompts → %d outputs (%d from cache), %d refused, %s %s; gallery %s", purpose,
             m["rows"], m["generated"], m["cached"], m["refused"], m["version"], m["variant"], gallery)
    return {k: m[k] for k in ("run_id", "version", "variant", "rows", "generated", "refused", "cached")} | {
        "gallery_uri": gallery, "purpose": purpose}


def _registry_status(lake, model: str) -> dict:
    from aigc.registry import Registry, VersionNotFound

    registry = Registry(lake, model)
    aliases = registry.aliases()["aliases"]
    out: dict = {"aliases": aliases}
    try:
        record = registry.get("candidate")
    except VersionNotFound:
        return out
    out["candidate_variants"] = {k: {m: v[m] for m in _VARIANT_FIGURES if m in v}
                                 for k, v in record.get("variants", {}).items()}
    out["eligible_variants"] = (record.get("smoke_test") or {}).get("eligible_variants")
    log.info("registry %s: aliases %s; candidate %s variants %s, eligible after gate 3: %s", model, aliases,
             record["version"], sorted(out["candidate_variants"]), out["eligible_variants"])
    return out


_VARIANT_FIGURES = ("size_bytes", "latency_ms_b1", "pixel_mae_vs_fp32", "agreement_vs_fp32")
"""What status and registry list show of a variant: its size, speed and the workload's agreement with fp32."""


def _model_status(catalog, date: str) -> dict | None:
    """The published training run of ``date`` (stage 2's hand-off), if any."""
    run = catalog.published("training", date)
    if run is None:
        return None
    s = run["summary"]
    log.info("model %s: run %s, %d steps on %d process(es), validation loss %.5f (from %.5f); weights %s",
             catalog.model, s["run_id"], s["steps"], s["world_size"], s["final_val_loss"], s["initial_val_loss"],
             s["weights_uri"])
    return {k: s.get(k) for k in ("run_id", "run_uri", "weights_uri", "steps", "world_size", "final_val_loss",
                                  "initial_val_loss", "imbalance", "measured_imbalance", "loss_png_uri")}


def _add_config_flags(p: argparse.ArgumentParser, section: str, cfg_cls, only: tuple[str, ...] = (),
                      skip: tuple[str, ...] = (), title: str | None = None) -> None:
    group = p.add_argument_group(title or f"{section} settings (defaults from --preset)")
    for f in dataclasses.fields(cfg_cls):
        if only and f.name not in only or f.name in skip:
            continue
        kind = {"int": int, "float": float, "bool": _boolean}.get(str(f.type).split()[0], str)  # annotations: strings
        group.add_argument(f"--{f.name.replace('_', '-')}", dest=f"{section}__{f.name}", type=kind, default=None,
                           metavar=f.name.upper())


def _boolean(text: str) -> bool:
    """A switch's value on the command line: true or false (yes/no, 1/0, on/off)."""
    value = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False,
             "off": False}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value


def _add_workload_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", dest="workload__name", default=None, metavar="NAME",
                   help="the model and data to run: image (built in, the default), an installed entry point of the "
                        "aigc.workloads group, or package.module:ATTRIBUTE")


def build_parser(workload: Workload | None = None) -> argparse.ArgumentParser:
    """Every command's flags; with ``workload``, also the flags of its own settings its commands take
    (``Workload.cli_settings``)."""
    from aigc.config import (
        BatchingConfig,
        CuratedGateThresholds,
        DeployConfig,
        DeployGateThresholds,
        EvaluateConfig,
        EvaluationGateThresholds,
        GenerateConfig,
        GenerateGateThresholds,
        ModelConfig,
        PrepareConfig,
        RawDropConfig,
        TelemetryConfig,
        TrainConfig,
        TrainingGateThresholds,
    )

    parser = argparse.ArgumentParser(
        prog="aigc", description=__doc__.splitlines()[0],
        epilog="Whoever runs aigc is the operator: the deployment's limits on what a trigger may ask for "
               "(AIGC_ALLOWED_ROOTS, AIGC_ALLOWED_WORKLOADS, AIGC_MAX_*) bind the Airflow form, the REST API and "
               "asset events, not this command.")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING …")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, fn: Callable, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(fn=fn)
        p.add_argument("--preset", default="default", help="named configuration: default or demo")
        _add_workload_flag(p)
        p.add_argument("--lake", default=None, help="lake URI (default $AIGC_LAKE_URI, else ./.lake)")
        p.add_argument("--date", required=True, help="logical date YYYY-MM-DD: the partition to write")
        if workload is not None and workload.settings_class and workload.cli_settings.get(name):
            _add_config_flags(p, "settings", workload.settings_class, only=workload.cli_settings[name],
                              title=f"workload {workload.name}'s settings (defaults from --preset)")
        return p

    p = command("make-raw", cmd_make_raw, "write a synthetic, dirty raw drop of image–caption pairs")
    p.add_argument("--out", default=None, help="raw root URI (default <lake>/raw/_synthetic/<source>: its own, "
                                                 "never a producer's; `aigc prepare --drop synthetic` reads it)")
    p.add_argument("--raw", default=None, help=argparse.SUPPRESS)
    _add_config_flags(p, "raw", RawDropConfig, skip=("drop",))

    for name, fn, help_ in (
        ("prepare", cmd_prepare, "prepare a raw drop: clean, dedup, filter, shard; then gate 1 and publish"),
        ("gate", cmd_gate, "run gate 1 on a prepared run"),
        ("publish", cmd_publish, "publish a prepared, gated run"),
    ):
        p = command(name, fn, help_)
        p.add_argument("--raw", default=None, help="a producer's raw root URI, read only (default <lake>/raw/<source>)")
        if name == "prepare":
            p.add_argument("--no-gate", action="store_true", help="stop after writing the staging run")
        else:
            p.add_argument("--run-id", required=True, help="the run id printed by `aigc prepare`")
        _add_config_flags(p, "prepare", PrepareConfig)
        _add_config_flags(p, "curated_gate", CuratedGateThresholds)
        if name == "prepare":
            p.add_argument("--source", dest="raw__source", default=None,
                           help="raw source name (default: the workload's)")
            p.add_argument("--drop", dest="raw__drop", default=None, choices=("producer", "synthetic"),
                           help="producer: a producer's drop under --raw or <lake>/raw/<source> (default preset); "
                                "synthetic: the one `aigc make-raw` wrote under <lake>/raw/_synthetic/<source> "
                                "(demo and smoke presets)")
    p = command("train", cmd_train, "train the generator under torchrun on the curated window; then gate 2 and publish")
    p.add_argument("--run-id", default=None, help="resume this run from its last checkpoint (default: a new run)")
    p.add_argument("--no-gate", action="store_true", help="stop after training, before gate 2 and publishing")
    p.add_argument("--node-rank", type=int, default=0, metavar="R",
                   help="with --nnodes N and no --rdzv-endpoint: this host's node (0 announces the rendezvous "
                        "through the lake, gates and publishes; 1…N-1 join it); every node uses the same --run-id")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config-json", default=None, help=argparse.SUPPRESS)
    for section, cls in (("model", ModelConfig), ("train", TrainConfig), ("train_gate", TrainingGateThresholds),
                         ("telemetry", TelemetryConfig)):
        _add_config_flags(p, section, cls)
    _add_config_flags(p, "prepare", PrepareConfig, only=("dataset",))

    p = command("deploy", cmd_deploy, "register the date's trained model, build its variants, run gate 3")
    p.add_argument("--version", default=None, help="a registered version (vNNNN) or alias instead of the date's model")
    for section, cls in (("deploy", DeployConfig), ("deploy_gate", DeployGateThresholds)):
        _add_config_flags(p, section, cls)
    _add_config_flags(p, "model", ModelConfig, only=("name",))

    p = command("generate", cmd_generate, "generate the date's prompts' outputs; gate 4; publish if the model "
                                          "is production (--model-ref production), else leave it to aigc evaluate")
    p.add_argument("--run-id", default=None, help="finish this run (shards already done are kept)")
    p.add_argument("--demo-prompts", action="store_true",
                   help="no prompt file for the date: write the demo set (held-out captions + blocked ones)")
    p.add_argument("--prompts-uri", default=None,
                   help="a prompt file in the lake (default: the date's prompts/<dataset>/dt=<date>/prompts.jsonl)")
    p.add_argument("--no-gate", action="store_true", help="stop before gate 4 and publishing")
    for section, cls in (("generate", GenerateConfig), ("batching", BatchingConfig),
                         ("generate_gate", GenerateGateThresholds), ("telemetry", TelemetryConfig)):
        _add_config_flags(p, section, cls)
    _add_config_flags(p, "model", ModelConfig, only=("name",))

    p = command("evaluate", cmd_evaluate, "evaluate the date's generated content; gate 5; promote and publish")
    p.add_argument("--generation-run", default=None, help="the generation run to evaluate (default: the newest)")
    p.add_argument("--run-id", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-gate", action="store_true", help="stop before gate 5 (nothing promoted or published)")
    for section, cls in (("evaluate", EvaluateConfig), ("evaluate_gate", EvaluationGateThresholds)):
        _add_config_flags(p, section, cls)
    _add_config_flags(p, "model", ModelConfig, only=("name",))

    p = command("review", cmd_review, "a review queue out as Label Studio tasks, or its JSON export in as labels")
    p.add_argument("action", choices=["export", "import"])
    p.add_argument("--evaluation-run", default=None, help="export: the evaluation run (default: the date's published)")
    p.add_argument("--image-base", default=None, help="export: the URL an image's lake key is appended to for "
                                                      "Label Studio (default: the lake's own URL)")
    p.add_argument("--export", default=None, help="import: the Label Studio JSON export, a key or URI in the lake "
                                                  "(default: every new one in review/<model>/inbox/)")
    _add_config_flags(p, "model", ModelConfig, only=("name",))

    p = sub.add_parser("registry", help="list, promote or roll back model versions",
                       description="list, promote or roll back model versions")
    p.set_defaults(fn=cmd_registry, preset="default", date=None)
    p.add_argument("action", choices=["list", "promote", "rollback", "lineage"])
    p.add_argument("--lake", default=None, help="lake URI (default $AIGC_LAKE_URI, else ./.lake)")
    p.add_argument("--version", default=None, help="promote: the version (or alias) to make production; lineage: "
                                                  "the version (or alias) whose chain to show (default production)")
    p.add_argument("--reason", default=None, help="recorded in the alias history")
    _add_workload_flag(p)
    _add_config_flags(p, "model", ModelConfig, only=("name",))

    p = command("status", cmd_status, "what is published for a date, with its gate results")
    _add_config_flags(p, "prepare", PrepareConfig)
    _add_config_flags(p, "model", ModelConfig, only=("name",))
    return parser


# Commands that write a date's partitions (or the registry on its behalf): they take the date's lease, the
# one a DAG run holds, so a manual command and a scheduled run of one date cannot interleave.
WRITES = {"prepare", "publish", "train", "deploy", "generate", "evaluate"}
CLI_LEASE_TTL = dt.timedelta(minutes=5)
"""A command renews its lease every minute while it runs: one killed outright (SIGKILL, no cleanup) holds the date
5 minutes at most, not the hours a DAG run's lease lasts."""


@contextlib.contextmanager
def _date_lease(args: argparse.Namespace) -> Iterator[None]:
    if args.command not in WRITES or getattr(args, "worker", False):  # a torchrun worker: its launcher holds it
        yield
        return
    from aigc.stages import holding_date

    # A retry of a run (--run-id) is the same owner as the attempt that died: it takes the lease over at once.
    run_id = getattr(args, "run_id", None)
    owner = (f"aigc {args.command} run {run_id}" if run_id
             else f"aigc {args.command} on {socket.gethostname()} (pid {os.getpid()})")
    with holding_date(open_lake(args.lake), args.date, owner, CLI_LEASE_TTL) as fence:
        args.fence = fence  # checked again just before anything is published
        yield


def _flags_workload(argv: list[str] | None) -> Workload | None:
    """The workload the command line names (``--workload``, else the default), whose settings' flags the parser then
    offers; None when it cannot be resolved (the command then says why, naming the workloads there are)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--workload", default=None)
    known, _ = pre.parse_known_args(argv)
    try:
        return load_workload(known.workload or default_workload())
    except Exception:  # noqa: BLE001 - reported by the command, with the known workloads
        return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser(_flags_workload(argv)).parse_args(argv)
    setup_logging(args.log_level)
    try:
        with _date_lease(args):
            summary = args.fn(args)
        if summary is None:  # a torchrun worker: its launcher prints the summary
            return 0
    except Exception as e:  # the CLI's one catch-all: a readable message, the traceback in debug logs
        log.debug("traceback", exc_info=True)
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        emit_summary({"command": args.command, "ok": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    emit_summary({"ok": True, **summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
