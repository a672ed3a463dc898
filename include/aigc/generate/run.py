"""``aigc generate``: plan → one task per shard (mapped in Airflow) → finish; gate 4 judges, then publish.

    generations/<model>/dt=<date>/run=<id>/shard-NNNNN.parquet   one row per prompt of the shard
    generations/<model>/dt=<date>/run=<id>/_SHARD-NNNNN.json     the ledger entry, written once, last
    generations/<model>/dt=<date>/run=<id>/gallery-NNNNN.png     the shard's preview (the workload's gallery)
    generations/<model>/dt=<date>/run=<id>/gallery.png, _MANIFEST.json
    cache/generations/<model>/<version>/<variant>/<kk>/<key>.*    outputs by content key (``engine.py``)

Exactly once: a shard's rows are written whole, then its ledger entry with a conditional create;
a retried or duplicated shard task that finds the entry returns it and writes nothing. Work a
killed attempt finished is in the cache (written per batch), so the retry does not redo it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from aigc.config import PipelineConfig
from aigc.config.variant_names import AUTO
from aigc.devices import pick_device
from aigc.generate import pinned
from aigc.generate.engine import answer_shard, output_row
from aigc.generate.prompts import prompts_key as dated_prompts_key
from aigc.lake import Lake
from aigc.lake.base import PreconditionFailed
from aigc.lake.keys import join, parse_date, partition, run_prefix
from aigc.lake.publish import new_run_id, publish
from aigc.registry.loader import served_variant, timed_on_gpu
from aigc.telemetry import across_tasks, sampler_for

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

log = logging.getLogger(__name__)
_CORE_BEFORE = [("prompt_id", pa.string()), ("prompt", pa.string()), ("seed", pa.int64()), ("status", pa.string()),
                ("reason", pa.string())]
_CORE_AFTER = [("model_version", pa.string()), ("variant", pa.string()), ("latency_ms", pa.float64()),
               ("batch_size", pa.int32()), ("cached", pa.bool_())]


def generation_schema(workload) -> pa.Schema:
    """One row per prompt: the core's columns around the workload's output columns."""
    return pa.schema([*_CORE_BEFORE, *[(n, getattr(pa, t)()) for n, t in workload.output_columns], *_CORE_AFTER])


MANIFEST = "_MANIFEST.json"
DEMO_PROMPTS = "prompts.jsonl"  # a demo prompt set, in the generation run that drew it


class VariantNotEligible(LookupError):
    """The chosen variant has not passed gate 3 for this version."""


def generation_prefix(model: str, date: str | dt.date, run_id: str) -> str:
    return run_prefix(partition("generations", model, date), run_id)


def plan_generation(lake: Lake, date: str | dt.date, cfg: PipelineConfig, workload: Workload, *,
                    run_id: str | None = None,
                    demo_prompts: bool = False, model_ref: str | None = None,
                    prompts_key: str | None = None) -> dict:
    """Check model, variant and prompts; split the prompts into shards. Writes the demo prompt set if asked.

    ``model_ref`` (default: the config's, ``candidate``) names the version or alias to generate with; a
    deployment's run passes the version it deployed, since another date's run may move the alias meanwhile.
    ``prompts_key``: a prompt file anywhere in the lake instead of the date's (``prompts/<dataset>/dt=…``)."""
    from aigc.registry import Registry

    date, g = parse_date(date), cfg.generate
    ref = model_ref or g.model_ref
    registry = Registry(lake, cfg.model.name)
    record = registry.get(ref)
    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or []
    if (g.variant if g.variant != AUTO else "fp32") not in eligible:
        raise VariantNotEligible(f"{cfg.model.name} {record['version']} ({ref}): variant {g.variant!r} has "
                                 f"not passed gate 3; eligible variants: {eligible or 'none (run aigc deploy)'}")
    run_id = run_id or new_run_id()
    key = prompts_key or dated_prompts_key(cfg.prepare.dataset, date)
    prefix = generation_prefix(cfg.model.name, date, run_id)
    if demo_prompts and not prompts_key and not lake.exists(key):
        key = join(prefix, DEMO_PROMPTS)
        if not lake.exists(key):  # a retry of this plan (same run id, same config) reuses its set
            workload.demo_prompts(lake, date.isoformat(), cfg, key)
    # The version every shard answers, whatever happens to the file; each line's own settings checked as it is pinned.
    pin = pinned.pin(lake, key, prefix, g, g.shards, workload.prompt_options(cfg))
    return {"stage": "plan-generation", "date": date.isoformat(), "run_id": run_id, "model": cfg.model.name,
            "model_ref": ref, "version": record["version"], "variant": g.variant, "prompts": pin["prompts"],
            "prompts_key": key, "prompts_sha256": pin["source"]["sha256"], "prompts_pinned": pin["pinned"],
            "refused_lines": pin["refused_lines"], "serves_on": serves_on(g.variant, record), "shards": pin["slices"],
            "eligible_variants": eligible, "gpu_ms": timed_on_gpu(record, eligible),
            **recommendations(registry, record)}


def recommendations(registry, record: dict) -> dict:
    """What ``auto`` serves per device class (``registry.loader.served_variant``): stage 5's recommendations for
    this version, else for production's (a candidate generates before it is evaluated: production's is the
    nearest measured choice, taken where gate 3 passed the same variant for this version). A record evaluated
    before recommendations were kept per class has one, made on the evaluation's CPU: any CPU reads it."""
    def of(found: dict) -> dict:
        made = {c: r for c, r in (found.get("recommended_by_device") or {}).items() if r}  # a class with no pick
        return made or ({"cpu-evaluation": found["recommended"]} if found.get("recommended") else {})

    source = record
    production = registry.aliases()["aliases"].get("production")
    if not of(record) and production and production != record["version"]:
        source = registry.get(production)
    return {"recommended_by_device": of(source), "recommended_by": source["version"] if of(source) else None}


def serves_on(variant: str, record: dict) -> str:
    """Which kind of worker a variant's shards belong on: "cpu" for a variant that gate 3 timed on the CPU, an ONNX
    one (``variant.json``'s device: the GPU worker that built it had no onnxruntime CUDA provider, so it would hold
    a GPU slot and leave the GPU idle) or int8dyn (CPU kernels only), else "gpu" (torch variants, and ``auto``'s
    choice among them, take the worker's GPU when it has one)."""
    from aigc.registry.variants import CPU_KINDS, ONNX_KINDS

    device = str(((record.get("variants") or {}).get(variant) or {}).get("device", "cpu"))
    return "cpu" if variant in ONNX_KINDS + CPU_KINDS and not device.startswith("cuda") else "gpu"


def generate_shard(lake: Lake, plan: dict, shard: dict, cfg: PipelineConfig, workload: Workload) -> dict:
    """Generate one shard's prompts (or return its ledger entry if a previous attempt finished it)."""
    prefix = generation_prefix(plan["model"], plan["date"], plan["run_id"])
    k = shard["shard"]
    ledger_key = join(prefix, f"_SHARD-{k:05d}.json")
    if lake.exists(ledger_key):
        entry = lake.get_json(ledger_key)
        log.info("shard %d of run %s is already done (%d rows): nothing to do", k, plan["run_id"], entry["rows"])
        return {**entry, "already_done": True}
    started = time.perf_counter()
    # The variant this worker serves (``auto``: its device decides): what its rows, its cache keys and its entry name.
    device = pick_device()
    plan = {**plan, "variant": served_variant(plan["variant"], plan.get("eligible_variants") or [], device,
                                              plan.get("gpu_ms"), plan.get("recommended_by_device"))}
    entries = pinned.read_slice(lake, plan["prompts_pinned"], shard)
    prompts = [e for e in entries if "refused" not in e]
    with sampler_for(device, cfg.telemetry, f"generation shard {k}") as gpu:
        model = workload.shard_model(lake, plan, cfg)
        answered, report = answer_shard(lake, plan, prompts, cfg, model, [c for c, _ in workload.output_columns],
                                        prefix)
    rows = _in_line_order(entries, iter(answered), plan, workload)
    table = pa.Table.from_pylist(rows, schema=generation_schema(workload))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    shard_key = join(prefix, f"shard-{k:05d}.parquet")
    data = buf.getvalue()
    lake.put_bytes(shard_key, data)
    shown = [r for r in rows if r["status"] == "generated"][: cfg.generate.gallery_images]
    name, preview = workload.gallery(shown)
    stem, dot, suffix = name.rpartition(".")
    lake.put_bytes(join(prefix, f"{stem}-{k:05d}{dot}{suffix}"), preview)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("generated", "refused")}
    entry = {"shard": k, "rows": len(rows), "prompt_ids_sha256": hashlib.sha256(
                 "\n".join(sorted(r["prompt_id"] for r in rows)).encode()).hexdigest(),
             "key": shard_key, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), **counts,
             "cached": sum(r["cached"] for r in rows), "variant": plan["variant"], "batching": report,
             "gpu": gpu.summary(), "seconds": round(time.perf_counter() - started, 3)}
    try:
        lake.put_if_absent(ledger_key, json.dumps(entry, indent=2).encode())
    except PreconditionFailed:  # a duplicate attempt finished first: its entry stands, ours is identical
        return {**lake.get_json(ledger_key), "already_done": True}
    log.info("shard %d: %d prompts, %d generated (%d from cache), %d refused, %.1f items/s",
             k, len(rows), counts["generated"], entry["cached"], counts["refused"], report["items_per_s"])
    return entry


def _in_line_order(entries: list[dict], answered, plan: dict, workload) -> list[dict]:
    """The shard's rows in its lines' order: the workload's answers, and a refused row for each line that was not a
    prompt (its reason from ``pinned``)."""
    columns = [name for name, _ in workload.output_columns]
    return [next(answered) if "refused" not in e else
            output_row(plan, e, columns, status="refused", reason=e["refused"]) for e in entries]


def expected_prompt_ids(lake: Lake, plan: dict) -> set[str]:
    """Every prompt id the run must answer: its pinned slices' (each checked against its hash)."""
    return {e["prompt_id"] for piece in plan["shards"] for e in pinned.read_slice(lake, plan["prompts_pinned"], piece)}


def generation_rows(lake: Lake, manifest: dict, columns: list[str] | None = None) -> pa.Table:
    """Every output row of a finished generation run (its manifest lists the shards), streamed by the lake."""
    return lake.read_parquet(manifest["shards"], columns=columns)


def finish_generation(lake: Lake, plan: dict, cfg: PipelineConfig, workload: Workload) -> dict:
    """Every shard's ledger entry present → the run's gallery and manifest."""
    prefix = generation_prefix(plan["model"], plan["date"], plan["run_id"])
    entries = []
    for shard in plan["shards"]:
        key = join(prefix, f"_SHARD-{shard['shard']:05d}.json")
        if not lake.exists(key):
            raise RuntimeError(f"shard {shard['shard']} of generation run {plan['run_id']} has no ledger entry "
                               f"({lake.url(key)}): it did not finish")
        entries.append(lake.get_json(key))
    per_shard = max(1, cfg.generate.gallery_images // len(entries))
    columns = ["prompt_id", "status", "prompt", *[n for n, _ in workload.output_columns]]
    shown = []
    for e in entries:
        shown += [r for r in lake.read_parquet([e], columns=columns).to_pylist()
                  if r["status"] == "generated"][:per_shard]
    gallery_name, preview = workload.gallery(shown)
    lake.put_bytes(join(prefix, gallery_name), preview)
    # What the shards served: the variant asked for, or where it was ``auto``, what the workers chose.
    served = "+".join(sorted({e.get("variant", plan["variant"]) for e in entries}))
    manifest = {**{k: plan[k] for k in ("date", "run_id", "model", "version", "prompts")}, "variant": served,
                "variant_asked": plan["variant"], "recommended_by": plan.get("recommended_by"),
                "model_ref": plan.get("model_ref"),
                "prompts_key": plan["prompts_key"], "prompts_uri": lake.url(plan["prompts_key"]),
                "prompts_sha256": plan["prompts_sha256"], "prompts_pinned": plan["prompts_pinned"],
                "plan_shards": plan["shards"],
                "shards": entries, "rows": sum(e["rows"] for e in entries),
                "generated": sum(e["generated"] for e in entries), "refused": sum(e["refused"] for e in entries),
                "cached": sum(e["cached"] for e in entries), "gallery": gallery_name,
                "gpu": across_tasks([e.get("gpu") or {} for e in entries], cfg.telemetry.min_gpu_utilisation)}
    lake.put_json(join(prefix, MANIFEST), manifest)
    return {"stage": "generate", **{k: manifest[k] for k in ("date", "run_id", "model", "model_ref", "version",
                                                              "variant", "rows", "generated", "refused", "cached",
                                                              "gpu")},
            "run_uri": lake.url(prefix), "gallery_uri": lake.url(join(prefix, gallery_name))}


def publish_generations(lake: Lake, model: str, date: str | dt.date, run_id: str) -> dict:
    """Publish content made for users (production's answers to a prompt file): the date's pointer names the newest,
    and no publication collects an earlier one (``keep_superseded``): content is kept until its owner deletes it.
    A candidate's generations never come here: its evaluation publishes them as its evaluation set."""
    pointer = publish(lake, partition("generations", model, date), run_id, keep_superseded=True, manifest=MANIFEST)
    return {"stage": "publish-generations", "run_uri": lake.url(pointer["run_prefix"]),
            "replaced_run_id": pointer["previous_run_id"]}
