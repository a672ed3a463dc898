"""The image workload's demo prompts: held-out captions of the date's curated partition and a few blocked ones."""

from __future__ import annotations

import datetime as dt
import json
import random

from aigc.config import GenerateConfig
from aigc.lake import Lake
from aigc.safety import blocked_terms


def make_demo_prompts(lake: Lake, dataset: str, date: str | dt.date, cfg: GenerateConfig, key: str) -> dict:
    """Held-out captions of the date's curated partition (its validation split) and a few blocked ones, at ``key``."""
    from aigc.train.data import load_window

    index = load_window(lake, dataset, date, 1, ("caption",))
    _train, held_out = index.split(0.05, 10**9)
    every = index.columns["caption"]
    captions = [every[i] for i in held_out] or every
    rng = random.Random(cfg.seed)
    chosen = [rng.choice(captions) for _ in range(cfg.prompts)]
    terms = blocked_terms()
    blocked = [f"{rng.choice(captions)} with {rng.choice(terms)}" for _ in range(cfg.blocked_prompts)]
    rows = [{"prompt_id": f"p-{i:06d}", "prompt": p, "seed": cfg.seed + i} for i, p in enumerate(chosen + blocked)]
    rng.shuffle(rows)  # blocked prompts land in every shard, not all in the last one
    lake.put_bytes(key, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return {"prompts_uri": lake.url(key), "prompts": len(rows), "blocked": len(blocked)}
