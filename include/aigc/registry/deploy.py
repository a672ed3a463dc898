"""``aigc deploy``: register a trained model as a version, build its variants, measure them.

Registration is idempotent by content: the same weights registered twice are one version.
Variants are written under the version and recorded in its version.json with size on disk,
latency per sample at batch 1 and at a larger batch, and agreement with fp32 on a fixed,
seeded prompt set. Gate 3 (``quality/deploy.py``) judges those records.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import statistics
import time

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from aigc.config import DeployConfig
from aigc.devices import pick_device
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition
from aigc.lake.publish import resolve
from aigc.models import Vocab
from aigc.registry import variants
from aigc.registry.loader import CARD, Generator, build_model, runner_for, serving_device, variant_key
from aigc.registry.onnx_export import export_onnx, quantize_int8
from aigc.registry.safeload import check_weights
from aigc.registry.store import Registry, sha256
from aigc.shapes import random_scene

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
        for name in COPIED:
            data = weights if name == "model.safetensors" else lake.get_bytes(join(run, name))
            lake.put_bytes(join(prefix, name), data)
            files[name] = sha256(data)
        record = registry.complete(version, {
            "weights_sha256": digest,
            "content_hash": sha256("".join(f"{n}={h};" for n, h in sorted(files.items())).encode()),
            "files": files, "date": date.isoformat(), "training_run": lake.url(run),
            "lineage": card["lineage"], "parameters": card["parameters"],
            "training": {k: summary[k] for k in ("steps", "world_size", "precision", "initial_val_loss",
                                                 "final_val_loss", "imbalance", "resumed_from_step")},
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


def smoke_prompts(n: int, seed: int) -> tuple[list[str], list[int]]:
    """A fixed, seeded prompt set from the reference grammar, with one generation seed per prompt."""
    rng = random.Random(seed)
    return [random_scene(rng).caption for _ in range(n)], [seed + i for i in range(n)]


def _calibration_captions(lake: Lake, card: dict, record: dict, cfg: DeployConfig) -> list[str]:
    """Captions of the curated partition the version was trained on (the newest of its window)."""
    from aigc.train.data import load_window

    dataset = card["lineage"].get("dataset", "shapes")
    try:
        captions = load_window(lake, dataset, record["date"], 1).captions
    except LookupError:
        log.warning("no curated partition of %s for %s: calibrating on the reference grammar", dataset,
                    record["date"])
        captions = smoke_prompts(cfg.calibration_samples, cfg.seed + 1)[0]
    return captions[: cfg.calibration_samples]


def version_inputs(lake: Lake, model: str, ref: str) -> tuple[Registry, dict, str, dict, bytes]:
    """(registry, record, version prefix, model card, fp32 weights checked against the record) of a version."""
    registry = Registry(lake, model)
    record = registry.get(ref)
    prefix = registry.version_prefix(record["version"])
    fp32_bytes = lake.get_bytes(join(prefix, "model.safetensors"))
    check_weights(fp32_bytes, record["weights_sha256"], lake.url(join(prefix, "model.safetensors")))
    return registry, record, prefix, lake.get_json(join(prefix, CARD)), fp32_bytes


def build_variants(lake: Lake, model: str, ref: str, cfg: DeployConfig) -> dict:
    """Build (or rebuild) every configured variant of a version and record its measurements."""
    registry, record, prefix, card, fp32_bytes = version_inputs(lake, model, ref)
    version = record["version"]
    prompts, seeds = smoke_prompts(cfg.smoke_prompts, cfg.seed)
    device = pick_device()  # timed where they will serve: this worker's GPU on the gpu queue
    generators: dict[str, Generator] = {}
    built: dict[str, dict] = {}
    baseline = None
    for kind, data in _variant_bytes(lake, card, record, fp32_bytes, prompts, cfg):
        key = variant_key(prefix, kind)
        if kind != "fp32":
            lake.put_bytes(key, data)
        on = serving_device(kind, device)
        runner, vocab, model_cfg, dtype = runner_for(card, kind, data, on)
        gen = generators[kind] = Generator(runner, vocab, model_cfg, version=version, variant=kind, device=on,
                                           dtype=dtype)
        images = gen.generate(prompts, seeds).float()  # (N, R, R, 3)
        baseline = images if baseline is None else baseline
        mse = float(((images - baseline) ** 2).mean())
        built[kind] = {
            "variant": kind, "weights": key, "weights_sha256": sha256(data), "size_bytes": len(data),
            "size_vs_fp32": round(len(data) / len(fp32_bytes), 4), "compute": variants.COMPUTE[kind],
            "pixel_mae_vs_fp32": round(float((images - baseline).abs().mean()), 4),
            "psnr_db_vs_fp32": round(10 * math.log10(255**2 / mse), 2) if mse > 0 else None,
            "image_std": round(float(images.flatten(1).std(dim=1).mean()), 3),
            "sparsity": None if kind in variants.ONNX_KINDS else round(variants.sparsity_of(runner.state_dict()), 4),
            "smoke_prompts": cfg.smoke_prompts, "prompt_seed": cfg.seed, "threads": torch.get_num_threads(),
            "device": str(on),
        }
    devices = {kind: gen.device for kind, gen in generators.items()}
    for kind, timing in _latencies(generators, prompts, seeds, cfg, devices).items():
        entry = built[kind]
        entry.update(timing)
        if kind != "fp32":
            entry["latency_b1_vs_fp32"] = round(entry["latency_ms_b1"] / built["fp32"]["latency_ms_b1"], 3)
        lake.put_json(join(prefix, "variants", kind, "variant.json"), entry)
        log.info("%s %s %-6s %7.1f KiB (%.2f× fp32)  %.3f ms/sample at b1, %.3f at b%d  MAE %.2f vs fp32",
                 model, version, kind, entry["size_bytes"] / 1024, entry["size_vs_fp32"], entry["latency_ms_b1"],
                 entry[f"latency_ms_b{cfg.latency_batch}"], cfg.latency_batch, entry["pixel_mae_vs_fp32"])
    registry.update_record(version, variants={**record.get("variants", {}), **built})
    return {"stage": "variants", "model": model, "version": version, "variants": built}


def _variant_bytes(lake: Lake, card: dict, record: dict, fp32_bytes: bytes, prompts: list[str], cfg: DeployConfig):
    """(kind, bytes to store) for every configured variant, the fp32 baseline first."""
    state = load_safetensors(fp32_bytes)
    onnx_fp32 = None
    for kind in cfg.variant_list:
        if kind == "fp32":
            yield kind, fp32_bytes
        elif kind in variants.ONNX_KINDS:
            if onnx_fp32 is None:
                fp32_model, vocab = build_model(card)
                fp32_model.load_state_dict(state)
                onnx_fp32 = export_onnx(fp32_model, vocab, prompts)
            yield kind, onnx_fp32 if kind == "onnx" else quantize_int8(
                onnx_fp32, Vocab.from_dict(card["vocab"]), card["model"]["max_tokens"], card["model"]["latent_dim"],
                _calibration_captions(lake, card, record, cfg))
        else:
            yield kind, save_safetensors(variants.encode(kind, state, sparsity=cfg.sparsity))


def _latencies(generators: dict, prompts: list[str], seeds: list[int], cfg: DeployConfig,
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
