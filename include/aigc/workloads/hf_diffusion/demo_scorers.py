"""The demo's CLIP (``scorers.DEMO_CLIP``): a small ``CLIPModel`` built from a config and trained offline, at build
time, on renders of the shapes world and their captions (the contrastive loss CLIP is trained with), saved with
``save_pretrained`` beside its tokenizer and image processor. Nothing is downloaded.

It is plumbing: the demo's captions are the shapes grammar, which the shapes checker reads exactly; this CLIP learns
colour and shape from a few thousand renders and little else, so its scores show the CLIP path working end to end on
the demo, not a judgement a real CLIP would make. Built once per host in the cache (``hf_folder.built_once``).
"""

from __future__ import annotations

from pathlib import Path

from aigc.workloads.hf_folder import built_once

RESOLUTION = 32
WIDTH = 64
STEPS = 150
BATCH = 64
LAYOUT_VERSION = "v1"


def build_demo_clip(folder: Path, seed: int = 0, steps: int = STEPS) -> Path:
    """Train and save the demo CLIP into ``folder``."""
    import random

    import numpy as np
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer
    from transformers.utils import logging as hf_logging

    from aigc.workloads import world
    from aigc.workloads.hf_diffusion.demo_base import MAX_TOKENS, build_tokenizer

    torch.manual_seed(seed)
    build_tokenizer(folder, seed)
    tokenizer = CLIPTokenizer.from_pretrained(folder, local_files_only=True)
    layer = {"hidden_size": WIDTH, "intermediate_size": 2 * WIDTH, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = CLIPConfig(text_config={**layer, "vocab_size": len(tokenizer), "max_position_embeddings": MAX_TOKENS,
                                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                                     "pad_token_id": tokenizer.pad_token_id},
                        vision_config={**layer, "image_size": RESOLUTION, "patch_size": 8}, projection_dim=WIDTH)
    model = CLIPModel(config)
    processor = CLIPImageProcessor(size={"shortest_edge": RESOLUTION},
                                   crop_size={"height": RESOLUTION, "width": RESOLUTION})
    rng = random.Random(f"hf-diffusion-demo-clip/{seed}")
    scenes = [world.random_scene(rng) for _ in range(2048)]
    pixels = processor(images=[np.asarray(world.render(s, RESOLUTION)) for s in scenes],
                       return_tensors="pt")["pixel_values"]
    tokens = tokenizer([s.caption for s in scenes], padding=True, return_tensors="pt")
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    order = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = torch.randint(0, len(scenes), (BATCH,), generator=order)
        loss = model(input_ids=tokens["input_ids"][batch], attention_mask=tokens["attention_mask"][batch],
                     pixel_values=pixels[batch], return_loss=True).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    hf_logging.disable_progress_bar()
    model.eval().save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


def demo_clip_folder() -> Path:
    import transformers

    return built_once(f"demo-clip-{LAYOUT_VERSION}-transformers-{transformers.__version__}", build_demo_clip,
                      "the demo CLIP (trained on the shapes world only)")
