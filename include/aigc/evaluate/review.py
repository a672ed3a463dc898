"""The human-review queue (active learning) and what reviewers' labels say about the checker.

Each evaluation exports its least certain outputs (lowest checker margin) to
``evaluations/<model>/dt=…/run=…/review/queue.jsonl`` with a thumbnail per item under
``review/images/``. A reviewer copies lines of a queue into a labels file,
``evaluations/<model>/labels/<anything>.jsonl``, adding ``"human_correct": true|false`` (does
the image show everything the prompt asks?). Every later evaluation reads all labels files
and reports how often the checker's verdict (``checker_correct``) agrees with the human's.
"""

from __future__ import annotations

import json

from aigc.lake import Lake
from aigc.lake.keys import join


def export_queue(lake: Lake, prefix: str, generated: list[dict], readings: list[dict], n: int, run_id: str) -> int:
    ranked = sorted(range(len(generated)), key=lambda i: (readings[i]["margin"], generated[i]["prompt_id"]))[:n]
    lines = []
    for i in ranked:
        row, reading = generated[i], readings[i]
        image_key = join(prefix, "review", "images", f"{row['prompt_id']}.png")
        lake.put_bytes(image_key, row["image"])
        lines.append({"run_id": run_id, "prompt_id": row["prompt_id"], "prompt": row["prompt"], "seed": row["seed"],
                      "image": lake.url(image_key), "checker_margin": round(reading["margin"], 4),
                      "checker_read": reading["read"], "checker_correct": reading.get("all_correct"),
                      "human_correct": None})
    lake.put_bytes(join(prefix, "review", "queue.jsonl"), "".join(json.dumps(x) + "\n" for x in lines).encode())
    return len(lines)


def agreement(lake: Lake, model: str) -> dict:
    """Checker-vs-human agreement over every labelled item, with the count it rests on."""
    labelled = []
    for key in lake.list(join("evaluations", model, "labels")):
        if key.endswith(".jsonl"):
            for raw in lake.iter_lines(key):
                if raw.strip():
                    item = json.loads(raw)
                    if item.get("human_correct") is not None and item.get("checker_correct") is not None:
                        labelled.append(item)
    agree = sum(bool(x["human_correct"]) == bool(x["checker_correct"]) for x in labelled)
    return {"labelled": len(labelled), "human_agreement": round(agree / len(labelled), 4) if labelled else None}
