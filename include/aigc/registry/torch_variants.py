"""Stage 3 for any workload whose model is a torch module: the torch variants of a version, measured.

fp32, bf16, pruned and int8dyn are encodings of a state dict (``variants.encode``), so they need nothing from the
workload but a way to load and run them (``Workload.serving``); each variant answers the workload's
smoke prompts, is measured against fp32 by the workload (``measure_variant``) and by its serving
(``Serving.divergence``: a language model's next-token KL), and is timed at batch 1
and at ``latency_batch``, every variant in turn in each round. Gate 3 (``quality/deploy.py``) judges.
"""

from __future__ import annotations

import logging

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from aigc.config.variant_names import encoding_of
from aigc.devices import pick_device
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.registry import variants
from aigc.registry.loader import serving_device, variant_key
from aigc.registry.store import sha256

log = logging.getLogger(__name__)


def build_torch_variants(lake: Lake, model: str, ref: str, cfg, workload) -> dict:
    """Build (or rebuild) the configured variants a workload supports; record each one's measurements."""
    from aigc.registry.deploy import latencies, version_inputs

    d = cfg.deploy
    registry, record, prefix, card, fp32_bytes = version_inputs(lake, model, ref)
    version = record["version"]
    kinds = [k for k in d.variant_list if workload.builds(k) and k not in variants.ONNX_KINDS]
    skipped = [k for k in d.variant_list if k not in kinds]
    if skipped:
        log.warning("%s: variant(s) %s not built: workload %r builds %s%s", model, skipped, workload.name,
                    [k for k in workload.variant_kinds if k not in variants.ONNX_KINDS],
                    " with steps (bf16-s20)" if workload.variant_steps else "")
    prompts = workload.smoke_prompts(d.smoke_prompts, d.seed)
    seeds = [d.seed + i for i in range(len(prompts))]
    state = load_safetensors(fp32_bytes)
    device = pick_device()  # timed where they will serve: this worker's GPU on the gpu queue
    servings, built, devices, baseline = {}, {}, {}, None
    encoded = {"fp32": fp32_bytes}  # by encoding: a variant with steps reads its encoding's weights
    for kind in ["fp32", *[k for k in kinds if k != "fp32"]]:
        encoding, key = encoding_of(kind), variant_key(prefix, kind)
        if encoding not in encoded:
            encoded[encoding] = save_safetensors(variants.encode(encoding, state, sparsity=d.sparsity))
            lake.put_bytes(key, encoded[encoding])
        data = encoded[encoding]
        where = devices[kind] = serving_device(kind, device)
        serving = servings[kind] = workload.serving(card, kind, data, where, version)
        outputs = serving.generate(prompts, seeds)
        baseline = outputs if baseline is None else baseline
        built[kind] = {"variant": kind, "weights": key, "weights_sha256": sha256(data), "size_bytes": len(data),
                       "size_vs_fp32": round(len(data) / len(fp32_bytes), 4), "compute": variants.COMPUTE[encoding],
                       **workload.measure_variant(outputs, baseline), "smoke_prompts": len(prompts),
                       **serving.divergence(servings["fp32"], prompts, seeds),
                       "prompt_seed": d.seed, "threads": torch.get_num_threads(), "device": str(where)}
    for kind, timing in latencies(servings, prompts, seeds, d, devices).items():
        entry = built[kind]
        entry.update(timing)
        if kind != "fp32":
            entry["latency_b1_vs_fp32"] = round(entry["latency_ms_b1"] / built["fp32"]["latency_ms_b1"], 3)
        lake.put_json(join(prefix, "variants", kind, "variant.json"), entry)
        log.info("%s %s %-6s %7.1f KiB (%.2f× fp32)  %.3f ms/sample at b1", model, version, kind,
                 entry["size_bytes"] / 1024, entry["size_vs_fp32"], entry["latency_ms_b1"])
    registry.update_record(version, variants={**record.get("variants", {}), **built})
    return {"stage": "variants", "model": model, "version": version, "variants": built}
