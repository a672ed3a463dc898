"""What reviewers' labels say about a workload's checker.

Each evaluation exports its least certain outputs to ``evaluations/<model>/dt=…/run=…/review/queue.jsonl`` (the
workload's evaluation writes it: for images with a thumbnail per item). A reviewer copies lines of a queue into a
labels file, ``evaluations/<model>/labels/<anything>.jsonl``, adding ``"human_correct": true|false`` (is the output
right for its prompt?). Every later evaluation reads all labels files and reports how often the checker's verdict
(``checker_correct``) agrees with the human's, and per attribute where labels name them (``human_attributes`` against
``checker_attributes``: Label Studio's per-attribute choices, ``labelstudio.py``), each with its interval.
"""

from __future__ import annotations

from aigc.evaluate.stats import wilson
from aigc.jsonlines import JsonLimits, Refused, read_json_object
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.lines import LongLine

LABEL_LIMITS = JsonLimits(max_line_bytes=64 * 1024, max_json_depth=8, max_json_values=1000)
"""A label line is a queue line plus a verdict: a few hundred bytes."""
REFUSED_SHOWN = 20


def read_labels(lake: Lake, model: str) -> tuple[list[dict], list[dict]]:
    """(every label of the model's labels files: a line with a human verdict; every line that is not a label:
    malformed, oversized, not an object, with its reason). The quarantine of an import is not read."""
    labels, refused = [], []
    for key in lake.list(join("evaluations", model, "labels")):
        if key.endswith(".jsonl") and "/_quarantine/" not in key:  # what an import refused is not a label
            for n, raw in enumerate(lake.iter_lines(key, max_line_bytes=LABEL_LIMITS.max_line_bytes), start=1):
                if not raw.strip() and not isinstance(raw, LongLine):
                    continue
                try:
                    item = read_json_object(raw, LABEL_LIMITS)
                except Refused as e:
                    refused.append({"file": lake.url(key), "line": n, "reason": e.reason, "detail": e.detail})
                    continue
                if item.get("human_correct") is not None:
                    labels.append(item)
    return labels, refused


def agreement(lake: Lake, model: str, confidence: float = 0.95) -> dict:
    """Checker-vs-human agreement over every labelled item, with the count it rests on. A line that is not a label
    (malformed, oversized, not an object) is left out and listed with its reason, never a failed evaluation."""
    labels, refused = read_labels(lake, model)
    labelled = [x for x in labels if x.get("checker_correct") is not None]
    agree = sum(bool(x["human_correct"]) == bool(x["checker_correct"]) for x in labelled)
    by_attribute: dict[str, list[bool]] = {}
    for x in labelled:
        human, checker = x.get("human_attributes"), x.get("checker_attributes")
        if isinstance(human, dict) and isinstance(checker, dict):
            for a in sorted(set(human) & set(checker)):
                by_attribute.setdefault(str(a), []).append(bool(human[a]) == bool(checker[a]))
    return {"labelled": len(labelled), "human_agreement": round(agree / len(labelled), 4) if labelled else None,
            "human_agreement_interval": wilson(agree, len(labelled), confidence).to_dict() if labelled else None,
            "by_attribute": {a: {"labelled": len(v), **wilson(sum(v), len(v), confidence).to_dict()}
                             for a, v in sorted(by_attribute.items())},
            "refused_labels": len(refused), "refused_examples": refused[:REFUSED_SHOWN]}
