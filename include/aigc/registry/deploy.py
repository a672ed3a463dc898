"""``aigc deploy``: register a trained model as a version; the timing every workload's variants share.

Registration is idempotent by content: the same weights registered twice are one version. A workload builds its
variants (``Workload.build_variants``: the torch encodings of ``registry/torch_variants.py`` by default), each
recorded in the version's version.json with size on disk, latency per sample at batch 1 and at a larger batch
(``latencies``), and agreement with fp32 on the workload's smoke prompts. Gate 3 (``quality/deploy.py``) judges
those records.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import time

import torch

from aigc.config import DeployConfig
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition
from aigc.lake.publish import resolve
from aigc.registry.loader import CARD
from aigc.registry.safeload import check_weights
from aigc.registry.store import Registry, sha256
from aigc.telemetry import training_figures

log = logging.getLogger(__name__)
COPIED = ("model.safetensors", CARD, "metrics.parquet", "loss.png")


def register_trained(lake: Lake, model: str, date: str | dt.date) -> dict:
    """Register the published training run of ``date`` (stage 2's hand-off); point ``candidate`` at it."""
    from aigc.train.artifacts import SUMMARY

    date = parse_date(date)
    pointer = resolve(lake, partition("training", model, date))
    run = pointer["run_prefix"]
    card, summary = lake.get_json(join(run, CARD)), lake.get_json(join(run, SUMMARY))
    weights = lake.get_bytes(join(run, "model.safetensors"))
    check_weights(weights, card["weights_sha256"], lake.url(join(run, "model.safetensors")))
    registry = Registry(lake, model)
    digest = sha256(weights)
    existing = next((v for v in registry.versions() if v["weights_sha256"] == digest), None)
    if existing:
        log.info("%s: these weights are already %s; not registered again", model, existing["version"])
        record = existing
    else:
        version, prefix = registry.claim_next()
        files = {}
        loader_files = card.get("loader_files") or {}  # the workload's (a save_pretrained folder's config, tokenizer)
        for name in (*COPIED, *sorted(loader_files)):
            data = weights if name == "model.safetensors" else lake.get_bytes(join(run, name))
            if name in loader_files and sha256(data) != loader_files[name]:
                raise ValueError(f"{lake.url(join(run, name))} is not the file its training run wrote (sha256 "
                                 f"{sha256(data)}, the model card says {loader_files[name]}): not registered; "
                                 "train again")
            lake.put_bytes(join(prefix, name), data)
            files[name] = sha256(data)
        record = registry.complete(version, {
            "weights_sha256": digest,
            "content_hash": sha256("".join(f"{n}={h};" for n, h in sorted(files.items())).encode()),
            "files": files, "date": date.isoformat(), "training_run": lake.url(run),
            "lineage": card["lineage"], "parameters": card["parameters"],
            "training": {**{k: summary[k] for k in ("steps", "world_size", "precision", "initial_val_loss",
                                                    "final_val_loss", "imbalance", "resumed_from_step")},
                         "gpu": training_figures(lake, run)},
            "variants": {},
        })
        log.info("%s: registered %s from %s", model, version, lake.url(run))
    hold_lineage(lake, registry, record["version"], run, card["lineage"])
    aliases = registry.move("candidate", record["version"], reason=f"trained for {date}")
    return {"stage": "register", "model": model, "version": record["version"], "new": existing is None,
            "date": date.isoformat(), "aliases": aliases["aliases"],
            "version_uri": lake.url(registry.version_prefix(record["version"]))}


def hold_lineage(lake: Lake, registry: Registry, version: str, training_run: str, lineage: dict) -> None:
    """The version names its training run and the curated runs (with their quarantine) it was trained on: no
    publication's garbage collection deletes them while the version exists (``aigc.lake.refs``)."""
    from aigc.lake import refs
    from aigc.lake.keys import run_prefix

    curated = []
    for part in lineage.get("curated", []):
        for stage in ("curated", "quarantine"):
            curated.append(run_prefix(partition(stage, lineage["dataset"], part["date"]), part["run_id"]))
    refs.hold(lake, registry.version_prefix(version), [training_run, *curated],
              why=f"{version}'s training run and training data")


def version_inputs(lake: Lake, model: str, ref: str) -> tuple[Registry, dict, str, dict, bytes]:
    """(registry, record, version prefix, model card, fp32 weights checked against the record) of a version."""
    registry = Registry(lake, model)
    record = registry.get(ref)
    prefix = registry.version_prefix(record["version"])
    fp32_bytes = lake.get_bytes(join(prefix, "model.safetensors"))
    check_weights(fp32_bytes, record["weights_sha256"], lake.url(join(prefix, "model.safetensors")))
    return registry, record, prefix, lake.get_json(join(prefix, CARD)), fp32_bytes


def latencies(generators: dict, prompts: list[str], seeds: list[int], cfg: DeployConfig,
               devices: dict[str, torch.device]) -> dict[str, dict]:
    """Median ms per sample at batch 1 and at ``latency_batch``, every variant timed in turn in each
    round, so that a busy moment of a shared machine does not land on one variant only. On a GPU the clock
    stops once the device has finished (kernels run asynchronously)."""
    big = cfg.latency_batch
    batches = {1: (prompts[:1], seeds[:1]),
               big: ((prompts * (big // len(prompts) + 1))[:big], (seeds * (big // len(seeds) + 1))[:big])}
    times: dict[str, dict[int, list[float]]] = {k: {1: [], big: []} for k in generators}
    for gen in generators.values():  # warm-up
        for p, s in batches.values():
            gen.generate(p, s)
    threads = torch.get_num_threads()
    for _ in range(cfg.latency_repeats):
        for kind, gen in generators.items():
            for size, (p, s) in batches.items():
                # One item gains nothing from a thread team, and on a busy host a team's barrier waits
                # can multiply its time (seen here: 4 ms → 200 ms): batch 1 is timed on one thread.
                torch.set_num_threads(1 if size == 1 else threads)
                t0 = time.perf_counter()
                gen.generate(p, s)
                if devices[kind].type == "cuda":
                    torch.cuda.synchronize(devices[kind])
                times[kind][size].append((time.perf_counter() - t0) * 1000 / size)
    torch.set_num_threads(threads)
    return {kind: {"latency_ms_b1": round(statistics.median(t[1]), 4),
                   f"latency_ms_b{big}": round(statistics.median(t[big]), 4), "latency_batch": big,
                   "latency_repeats": cfg.latency_repeats}
            for kind, t in times.items()}
