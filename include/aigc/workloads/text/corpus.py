"""The text workload's reference world: long inventory logs of shapes scenes whose facts can be checked.

A document is a log of numbered items, each one scene of the shapes grammar (``aigc.workloads.world``), then
recall lines that restate items from far back::

    Log 7f3a of 2026-11-20.
    Item 1: a small red circle at the top.
    Item 2: a large blue square on the left.
    …
    Recall: item 2 is a large blue square on the left.

Every scene line is checkable (``parse_caption``) and every recall line is right or wrong against the
document itself, so the evaluation stage can judge generated text without a reference model: whether a
generated line is a valid scene, and whether a recalled fact restated from 512, 2,048 or 4,096 tokens
back is the one the document gave. Lengths are long-tailed (log-normal item counts), from a few items
to thousands (50 to 20,000 tokens).

``make_text_drop`` writes a raw drop of these documents with the dirt a real producer sends: empty or
tiny texts, binary junk, blocked terms, oversize documents, malformed lines, duplicated ids, exact and
near duplicates.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import random

from aigc.lake import Lake
from aigc.lake.keys import join, parse_date
from aigc.workloads.world import random_scene

SOURCE = "logs"
DIRT = ("empty", "tiny", "binary", "blocked", "oversize", "malformed_json", "missing_field", "duplicate_id",
        "exact_duplicate", "near_duplicate")
"""Kinds of planted dirt, each with the quarantine reason stage 1 must give it (``EXPECTED_REASON``)."""
EXPECTED_REASON = {"empty": "text_too_short", "tiny": "text_too_short", "binary": "text_charset",
                   "blocked": "blocked_term", "oversize": "text_too_long", "malformed_json": "malformed_json",
                   "missing_field": "missing_field", "duplicate_id": "duplicate_id",
                   "exact_duplicate": "exact_duplicate", "near_duplicate": "near_duplicate"}


def item_line(k: int, caption: str) -> str:
    return f"Item {k}: {caption}."


def recall_line(k: int, caption: str) -> str:
    return f"Recall: item {k} is {caption}."


def document(rng: random.Random, items: int, name: str) -> str:
    """A log of ``items`` scene lines and a recall line for every tenth item (at least one), drawn from ``rng``."""
    captions = [random_scene(rng).caption for _ in range(items)]
    lines = [f"Log {name}."] + [item_line(k + 1, c) for k, c in enumerate(captions)]
    for k in sorted(rng.sample(range(items), max(1, items // 10))):
        lines.append(recall_line(k + 1, captions[k]))
    return "\n".join(lines)


def item_count(rng: random.Random, mean_items: float, max_items: int) -> int:
    """Log-normal around ``mean_items`` (σ = 1.1: a long tail), clipped to [3, max_items]."""
    return max(3, min(max_items, round(math.exp(rng.gauss(math.log(mean_items), 1.1)))))


def make_text_drop(raw: Lake, date: str | dt.date, cfg, text) -> dict:
    """Write the drop for ``date`` under ``raw`` (``cfg``: RawDropConfig; ``text``: TextSettings); return counts."""
    date = parse_date(date)
    prefix = join(f"dt={date.isoformat()}")
    raw.delete_prefix(prefix)
    rng = random.Random(f"text/{cfg.seed}/{date.isoformat()}")
    created = f"{date.isoformat()}T00:00:00Z"
    lines: list[bytes] = []
    clean: list[dict] = []
    planted: dict[str, int] = {}
    for i in range(cfg.n):
        rec_id = hashlib.sha256(f"{cfg.seed}/{date}/{i}".encode()).hexdigest()[:16]
        kind = rng.choice(DIRT) if rng.random() < cfg.dirt_rate else None
        if kind in ("duplicate_id", "exact_duplicate") and not clean or kind == "near_duplicate" and not any(
                r["text"].count("\n") >= 20 for r in clean):
            kind = None  # nothing earlier to repeat yet (a near copy needs a log long enough to stay similar)
        if kind is None:
            record = {"id": rec_id, "text": document(rng, item_count(rng, text.mean_items, text.max_items), rec_id[:6]),
                      "source": SOURCE, "created_at": created}
            clean.append(record)
            lines.append(json.dumps(record).encode())
            continue
        planted[kind] = planted.get(kind, 0) + 1
        lines.append(_dirty(kind, rng, rec_id, created, clean, text))
    per_file = cfg.records_per_file
    for f in range(0, max(1, len(lines)), per_file):
        raw.put_bytes(join(prefix, f"records-{f // per_file:05d}.jsonl"), b"\n".join(lines[f:f + per_file]) + b"\n")
    raw.put_json(join(prefix, "_SUCCESS"), {"records": len(lines), "planted": planted})
    return {"date": date.isoformat(), "records": len(lines), "clean": len(clean), "planted": planted,
            "uri": raw.url(prefix)}


def _dirty(kind: str, rng: random.Random, rec_id: str, created: str, clean: list[dict], text) -> bytes:
    base = {"id": rec_id, "source": SOURCE, "created_at": created}
    if kind == "empty":
        return json.dumps({**base, "text": " \n\t "}).encode()
    if kind == "tiny":
        return json.dumps({**base, "text": "Log x."}).encode()
    if kind == "binary":
        junk = bytes(rng.randrange(256) for _ in range(400)).decode("latin-1")
        return json.dumps({**base, "text": "Log of bytes. " + junk}).encode()
    if kind == "blocked":
        doc = document(rng, 5, rec_id[:6]).split("\n")
        doc.insert(2, "Item 0: a gore scene.")
        return json.dumps({**base, "text": "\n".join(doc)}).encode()
    if kind == "oversize":
        return json.dumps({**base, "text": "Log z.\n" + "Item 1: a small red circle at the top.\n"
                           * (text.max_chars // 38 + 1)}).encode()
    if kind == "malformed_json":
        return b'{"id": "' + rec_id.encode() + b'", "text": "Log cut off'
    if kind == "missing_field":
        return json.dumps({"id": rec_id, "source": SOURCE, "created_at": created}).encode()
    earlier = rng.choice(clean)
    if kind == "duplicate_id":
        return json.dumps({**base, "id": earlier["id"], "text": document(rng, 8, rec_id[:6])}).encode()
    if kind == "exact_duplicate":  # the same text, reformatted: normalisation makes it equal
        return json.dumps({**base, "text": earlier["text"].replace("\n", "\r\n") + "  "}).encode()
    # near: a long log with one line changed (shingle Jaccard ≈ 0.9: similar, but a different document)
    doc = rng.choice([r for r in clean if r["text"].count("\n") >= 20])["text"].split("\n")
    k = rng.randrange(1, len(doc))
    doc[k] = doc[k].rsplit(":", 1)[0] + ": a large black square in the center."
    return json.dumps({**base, "text": "\n".join(doc)}).encode()
