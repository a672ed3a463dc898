"""The image workload's variants: the torch encodings plus ONNX (fp32 and static INT8, calibrated on the version's
curated captions), each compared with fp32 on seeded prompts of the reference grammar (pixel MAE, PSNR)."""

from __future__ import annotations

import logging
import math
import random

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from aigc.config import DeployConfig
from aigc.config.variant_names import VARIANTS
from aigc.devices import pick_device
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.registry import variants
from aigc.registry.deploy import latencies, version_inputs
from aigc.registry.loader import serving_device, variant_key
from aigc.registry.store import sha256
from aigc.workloads.image.onnx_export import export_onnx, quantize_int8
from aigc.workloads.image.serving import Generator, build_model, runner_for
from aigc.workloads.image.tokenizer import Vocab
from aigc.workloads.world import random_scene

log = logging.getLogger(__name__)


def smoke_prompts(n: int, seed: int) -> tuple[list[str], list[int]]:
    """A fixed, seeded prompt set from the reference grammar, with one generation seed per prompt."""
    rng = random.Random(seed)
    return [random_scene(rng).caption for _ in range(n)], [seed + i for i in range(n)]


def image_distance(images: torch.Tensor, baseline: torch.Tensor) -> dict:
    """A variant's images (N, R, R, 3, 0-255) against fp32's on the same prompts and seeds: mean absolute
    difference, PSNR, and their spread (a flat image has none)."""
    images, baseline = images.float(), baseline.float()
    mse = float(((images - baseline) ** 2).mean())
    return {"pixel_mae_vs_fp32": round(float((images - baseline).abs().mean()), 4),
            "psnr_db_vs_fp32": round(10 * math.log10(255**2 / mse), 2) if mse > 0 else None,
            "image_std": round(float(images.flatten(1).std(dim=1).mean()), 3)}


def _calibration_captions(lake: Lake, card: dict, record: dict, cfg: DeployConfig) -> list[str]:
    """Captions of the curated partition the version was trained on (the newest of its window)."""
    from aigc.train.data import load_window

    dataset = card["lineage"].get("dataset", "shapes")
    try:
        captions = load_window(lake, dataset, record["date"], 1, ("caption",)).columns["caption"]
    except LookupError:
        log.warning("no curated partition of %s for %s: calibrating on the reference grammar", dataset,
                    record["date"])
        captions = smoke_prompts(cfg.calibration_samples, cfg.seed + 1)[0]
    return captions[: cfg.calibration_samples]


def build_variants(lake: Lake, model: str, ref: str, cfg: DeployConfig, builds=None) -> dict:
    """Build (or rebuild) every configured variant of a version and record its measurements; ``builds``: which names
    this workload builds (``Workload.builds``; others are skipped with a warning), every encoding by default."""
    registry, record, prefix, card, fp32_bytes = version_inputs(lake, model, ref)
    version = record["version"]
    prompts, seeds = smoke_prompts(cfg.smoke_prompts, cfg.seed)
    device = pick_device()  # timed where they will serve: this worker's GPU on the gpu queue
    generators: dict[str, Generator] = {}
    built: dict[str, dict] = {}
    baseline = None
    for kind, data in _variant_bytes(lake, card, record, fp32_bytes, prompts, cfg, builds or VARIANTS.__contains__):
        key = variant_key(prefix, kind)
        if kind != "fp32":
            lake.put_bytes(key, data)
        on = serving_device(kind, device)
        runner, vocab, model_cfg, dtype = runner_for(card, kind, data, on)
        gen = generators[kind] = Generator(runner, vocab, model_cfg, version=version, variant=kind, device=on,
                                           dtype=dtype)
        images = gen.generate(prompts, seeds)  # (N, R, R, 3)
        baseline = images if baseline is None else baseline
        built[kind] = {
            "variant": kind, "weights": key, "weights_sha256": sha256(data), "size_bytes": len(data),
            "size_vs_fp32": round(len(data) / len(fp32_bytes), 4), "compute": variants.COMPUTE[kind],
            **image_distance(images, baseline),
            "sparsity": None if kind in variants.ONNX_KINDS else round(variants.sparsity_of(runner.state_dict()), 4),
            "smoke_prompts": cfg.smoke_prompts, "prompt_seed": cfg.seed, "threads": torch.get_num_threads(),
            "device": str(on),
        }
    devices = {kind: gen.device for kind, gen in generators.items()}
    for kind, timing in latencies(generators, prompts, seeds, cfg, devices).items():
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


def _variant_bytes(lake: Lake, card: dict, record: dict, fp32_bytes: bytes, prompts: list[str], cfg: DeployConfig,
                   builds):
    """(kind, bytes to store) for every configured variant this workload ``builds``, the fp32 baseline first."""
    state = load_safetensors(fp32_bytes)
    onnx_fp32 = None
    for kind in cfg.variant_list:
        if not builds(kind):
            log.warning("variant %s not built: this workload does not build it", kind)
        elif kind == "fp32":
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


