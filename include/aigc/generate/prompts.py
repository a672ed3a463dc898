"""The prompts of a logical date: a JSONL file in the lake, or a demo set drawn from held-out captions.

    prompts/<dataset>/dt=<YYYY-MM-DD>/prompts.jsonl      dropped by a producer
    generations/<model>/dt=…/run=<run_id>/prompts.jsonl  a demo set, written by the run that uses it

A dropped file wins. A demo set belongs to its generation run, so a re-run of the date with
another prompt count (or another seed) draws its own set instead of reusing an older one.

One JSON object per line: ``{"prompt_id": "p-000001", "prompt": "a small red circle on the left",
"seed": 17}``. ``prompt_id`` is unique within the file (the exactly-once ledger is keyed by it);
``seed`` is optional (default: the line number plus GenerateConfig.seed).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from importlib import resources

from aigc.config import GenerateConfig
from aigc.lake import Lake
from aigc.lake.base import ObjectNotFound
from aigc.lake.keys import join, partition

FILE = "prompts.jsonl"


class BadPrompts(ValueError):
    """A prompt file that is missing, empty or malformed: the message names the line."""


def prompts_key(dataset: str, date: str | dt.date) -> str:
    return join(partition("prompts", dataset, date), FILE)


def load_prompts(lake: Lake, key: str, cfg: GenerateConfig) -> list[dict]:
    """The prompts in the file at ``key``; BadPrompts naming the line if it is missing, empty or malformed."""
    try:
        lines = list(lake.iter_lines(key))
    except ObjectNotFound:
        raise BadPrompts(f"no prompt file at {lake.url(key)}; drop one (see aigc/generate/prompts.py for the "
                         "format) or generate the demo set") from None
    prompts, seen = [], set()
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            pid, text = str(row["prompt_id"]), str(row["prompt"])
        except (ValueError, KeyError, TypeError) as e:
            raise BadPrompts(f"{lake.url(key)} line {n}: expected a JSON object with prompt_id and prompt "
                             f"({type(e).__name__}: {e})") from None
        if pid in seen:
            raise BadPrompts(f"{lake.url(key)} line {n}: prompt_id {pid!r} appears twice")
        seen.add(pid)
        prompts.append({"prompt_id": pid, "prompt": text, "seed": int(row.get("seed", cfg.seed + n))})
    if not prompts:
        raise BadPrompts(f"{lake.url(key)} holds no prompts")
    return prompts


def _blocked_terms() -> list[str]:
    text = resources.files("aigc.data").joinpath("blocklist.txt").read_text("utf-8")
    return [t.strip() for t in text.splitlines() if t.strip() and not t.lstrip().startswith("#")]


def make_demo_prompts(lake: Lake, dataset: str, date: str | dt.date, cfg: GenerateConfig, key: str) -> dict:
    """Held-out captions of the date's curated partition (its validation split) and a few blocked ones, at ``key``."""
    from aigc.train.data import load_window

    index = load_window(lake, dataset, date, 1)
    _train, held_out = index.split(0.05, 10**9)
    captions = [index.captions[i] for i in held_out] or index.captions
    rng = random.Random(cfg.seed)
    chosen = [rng.choice(captions) for _ in range(cfg.prompts)]
    terms = _blocked_terms()
    blocked = [f"{rng.choice(captions)} with {rng.choice(terms)}" for _ in range(cfg.blocked_prompts)]
    rows = [{"prompt_id": f"p-{i:06d}", "prompt": p, "seed": cfg.seed + i} for i, p in enumerate(chosen + blocked)]
    rng.shuffle(rows)  # blocked prompts land in every shard, not all in the last one
    lake.put_bytes(key, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return {"prompts_uri": lake.url(key), "prompts": len(rows), "blocked": len(blocked)}


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal [lo, hi) ranges; never an empty shard."""
    shards = max(1, min(shards, n))
    bounds = [round(k * n / shards) for k in range(shards + 1)]
    return list(zip(bounds, bounds[1:], strict=False))
