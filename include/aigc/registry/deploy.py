"""``aigc deploy``: register a trained model as a version, build its variants, measure them.

Registration is idempotent by content: the same weights registered twice are one version.
Variants are written under the version and recorded in its version.json with size on disk,
latency per sample at batch 1 and at a larger batch, and agreement with fp32 on a fixed,
seeded prompt set. Gate 3 (``quality/deploy.py``) judges those records.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import statistics
import time

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from aigc.config import DeployConfig
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition
from aigc.lake.publish import resolve
from aigc.registry import variants
from aigc.registry.loader import CARD, Generator, build_model, variant_key
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
    aliases = registry.move("candidate", record["version"], reason=f"trained for {date}")
    return {"stage": "register", "model": model, "version": record["version"], "new": existing is None,
            "date": date.isoformat(), "aliases": aliases["aliases"],
            "version_uri": lake.url(registry.version_prefix(record["version"]))}


def smoke_prompts(n: int, seed: int) -> tuple[list[str], list[int]]:
    """A fixed, seeded prompt set from the reference grammar, with one generation seed per prompt."""
    rng = random.Random(seed)
    return [random_scene(rng).caption for _ in range(n)], [seed + i for i in range(n)]


def _latency_ms(gen: Generator, prompts: list[str], seeds: list[int], batch: int, repeats: int) -> float:
    """Median milliseconds per sample at ``batch`` (after one warm-up call)."""
    p, s = (prompts * (batch // len(prompts) + 1))[:batch], (seeds * (batch // len(seeds) + 1))[:batch]
    gen.generate(p, s)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gen.generate(p, s)
        times.append((time.perf_counter() - t0) * 1000 / batch)
    return statistics.median(times)


def build_variants(lake: Lake, model: str, ref: str, cfg: DeployConfig) -> dict:
    """Build (or rebuild) every configured variant of a version and record its measurements."""
    registry = Registry(lake, model)
    record = registry.get(ref)
    version, prefix = record["version"], registry.version_prefix(record["version"])
    card = lake.get_json(join(prefix, CARD))
    fp32_bytes = lake.get_bytes(join(prefix, "model.safetensors"))
    check_weights(fp32_bytes, record["weights_sha256"], lake.url(join(prefix, "model.safetensors")))
    state = load_safetensors(fp32_bytes)
    prompts, seeds = smoke_prompts(cfg.smoke_prompts, cfg.seed)
    baseline = None
    built = {}
    for kind in cfg.variant_list:
        data = fp32_bytes if kind == "fp32" else save_safetensors(variants.encode(kind, state, sparsity=cfg.sparsity))
        key = variant_key(prefix, kind)
        if kind != "fp32":
            lake.put_bytes(key, data)
        decoded, dtype = variants.decode(kind, load_safetensors(data))
        net, vocab = build_model(card)
        net.load_state_dict(decoded)
        gen = Generator(net, vocab, version=version, variant=kind, device=torch.device("cpu"), dtype=dtype)
        images = gen.generate(prompts, seeds).float()  # (N, R, R, 3)
        if baseline is None:
            baseline = images
        mae = float((images - baseline).abs().mean())
        entry = {
            "variant": kind, "weights": key, "weights_sha256": sha256(data), "size_bytes": len(data),
            "size_vs_fp32": round(len(data) / len(fp32_bytes), 4),
            "latency_ms_b1": round(_latency_ms(gen, prompts, seeds, 1, cfg.latency_repeats), 4),
            f"latency_ms_b{cfg.latency_batch}": round(
                _latency_ms(gen, prompts, seeds, cfg.latency_batch, max(1, cfg.latency_repeats // 2)), 4),
            "pixel_mae_vs_fp32": round(mae, 4),
            "psnr_db_vs_fp32": round(float(10 * torch.log10(255**2 / ((images - baseline) ** 2).mean()))
                                     if mae > 0 else float("inf"), 2),
            "image_std": round(float(images.flatten(1).std(dim=1).mean()), 3),
            "sparsity": round(variants.sparsity_of(decoded), 4), "dtype": str(dtype).removeprefix("torch."),
            "latency_batch": cfg.latency_batch, "smoke_prompts": cfg.smoke_prompts, "prompt_seed": cfg.seed,
            "threads": torch.get_num_threads(),
        }
        entry["compute"] = variants.COMPUTE[kind]
        if kind != "fp32":
            entry["latency_b1_vs_fp32"] = round(entry["latency_ms_b1"] / built["fp32"]["latency_ms_b1"], 3)
        lake.put_json(join(prefix, "variants", kind, "variant.json"), entry)
        built[kind] = entry
        log.info("%s %s %-6s %7.1f KiB (%.2f× fp32)  %.3f ms/sample at b1, %.3f at b%d  MAE %.2f vs fp32",
                 model, version, kind, len(data) / 1024, entry["size_vs_fp32"], entry["latency_ms_b1"],
                 entry[f"latency_ms_b{cfg.latency_batch}"], cfg.latency_batch, mae)
    registry.update_record(version, variants={**record.get("variants", {}), **built})
    return {"stage": "variants", "model": model, "version": version, "variants": built}
