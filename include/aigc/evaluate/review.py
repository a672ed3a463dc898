"""What reviewers' labels say about a workload's checker.

Each evaluation exports its least certain outputs (or as many drawn at random: ``evaluate.review_selection``) to
``evaluations/<model>/dt=…/run=…/review/queue.jsonl`` (the workload's evaluation writes it: for images with a
thumbnail per item; each line with its evaluation's date and how it was chosen). A reviewer copies lines of a queue
into a labels file, ``evaluations/<model>/labels/<anything>.jsonl``, adding ``"human_correct": true|false`` (is the
output right for its prompt?). Every later evaluation reads all labels files and reports how often the checker's verdict
(``checker_correct``) agrees with the human's, and per attribute where labels name them (``human_attributes`` against
``checker_attributes``: Label Studio's per-attribute choices, ``labelstudio.py``), each with its interval.
"""

from __future__ import annotations

import json

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
                verdict = item.get("human_correct")
                if isinstance(verdict, bool):
                    labels.append(item)
                elif verdict is not None:  # "false" would read as right: not a verdict at all
                    refused.append({"file": lake.url(key), "line": n, "reason": "not_a_verdict",
                                    "detail": f"human_correct is {json.dumps(verdict)[:80]}, not true or false"})
    return labels, refused


def used_in_training(record: dict) -> dict | None:
    """What reviewers' labels did to the training of a version (its record's lineage, ``aigc.train.feedback``), in
    brief; None where its training used none."""
    used = (record.get("lineage") or {}).get("review_labels")
    if not used:
        return None
    return {**{k: used.get(k) for k in ("setting", "factor", "labels", "prompts_wrong", "samples_matched",
                                        "training_samples_before", "training_samples_after")},
            "review_runs": len(used.get("review_runs") or [])}


def training_labels_text(used: dict | None) -> str:
    """``used_in_training``'s brief as a sentence (the report and the view)."""
    if not used:
        return "none (train.review_feedback off, or no labels before its date)"
    did = {"upweight": f"their {used['samples_matched']} samples seen ×{used['factor']}",
           "drop": f"their {used['samples_matched']} samples left out"}.get(used["setting"], used["setting"])
    return (f"{used['labels']} label(s) from {used['review_runs']} review run(s): {used['prompts_wrong']} prompt(s) "
            f"judged wrong, {did} (training samples {used['training_samples_before']} → "
            f"{used['training_samples_after']})")


def checker_rates(labels: list[dict], confidence: float = 0.95) -> dict:
    """The checker's sensitivity (it says right where reviewers say right) and specificity (wrong where they say
    wrong), from labels of randomly drawn outputs only (``selection: random``): a queue of the least certain outputs
    holds the checker's mistakes far more often than the day's outputs do, so its labels would misstate both rates.
    Each rate's interval is at the Bonferroni level 1 − (1 − ``confidence``)/2, so the two hold together at
    ``confidence``."""
    drawn = [x for x in labels if x.get("selection") == "random" and isinstance(x.get("checker_correct"), bool)]
    right = [x["checker_correct"] for x in drawn if x["human_correct"]]
    wrong = [not x["checker_correct"] for x in drawn if not x["human_correct"]]
    rates = {"labels": len(drawn), "human_right": len(right), "human_wrong": len(wrong)}
    if not right or not wrong:
        return {**rates, "reason": "needs labels of randomly drawn outputs that reviewers judged right and others "
                                   "they judged wrong (evaluate.review_selection=random)"}
    each = 1 - (1 - confidence) / 2
    return {**rates, "sensitivity": wilson(sum(right), len(right), each).to_dict(),
            "specificity": wilson(sum(wrong), len(wrong), each).to_dict()}


def calibrated(estimate: dict | None, rates: dict) -> dict | None:
    """The checker's alignment ``estimate`` corrected for its measured mistakes (Rogan and Gladen's estimator:
    (p + specificity − 1) / (sensitivity + specificity − 1), clipped to [0, 1]). The interval is the widest the
    corners of the three intervals give (the correction is monotone in each), so it holds the rates' uncertainty as
    well as the sample's: by the union bound it covers with at least 1 − 2 (1 − confidence) when ``estimate``'s and
    the rates' joint intervals are each at ``confidence``. Where some corner leaves the checker no better than a
    coin (sensitivity + specificity ≤ 1) the interval is [0, 1]. None without both rates."""
    if not estimate or estimate.get("value") is None or "sensitivity" not in rates:
        return None
    se, sp = rates["sensitivity"], rates["specificity"]

    def fix(p: float, sens: float, spec: float) -> float | None:
        youden = sens + spec - 1
        return None if youden <= 0 else min(1.0, max(0.0, (p + spec - 1) / youden))

    lows = [fix(estimate["lo"], a, b) for a in (se["lo"], se["hi"]) for b in (sp["lo"], sp["hi"])]
    highs = [fix(estimate["hi"], a, b) for a in (se["lo"], se["hi"]) for b in (sp["lo"], sp["hi"])]
    value = fix(estimate["value"], se["value"], sp["value"])
    informative = value is not None and None not in lows + highs
    return {"value": round(value, 4) if value is not None else None,
            "lo": round(min(lows), 4) if informative else 0.0, "hi": round(max(highs), 4) if informative else 1.0,
            "n": estimate.get("n"), "confidence": estimate.get("confidence"), "labels": rates["labels"]}


def calibration_text(rates: dict | None, fixed: dict | None) -> str:
    """The checker's measured rates and the alignment they correct, as a sentence (the report)."""
    if not rates or "sensitivity" not in rates:
        return f"not measured: {(rates or {}).get('reason', 'no labels')}"
    se, sp = rates["sensitivity"], rates["specificity"]
    corrected = (f"; the recommended configuration's alignment corrected by them {fixed['value']:.3f} "
                 f"[{fixed['lo']:.3f}, {fixed['hi']:.3f}]" if fixed and fixed.get("value") is not None else "")
    return (f"from {rates['labels']} randomly drawn labelled outputs, sensitivity {se['value']:.3f} "
            f"[{se['lo']:.3f}, {se['hi']:.3f}], specificity {sp['value']:.3f} [{sp['lo']:.3f}, {sp['hi']:.3f}]"
            + corrected)


def agreement(lake: Lake, model: str, confidence: float = 0.95) -> dict:
    """Checker-vs-human agreement over every labelled item, with the count it rests on. A line that is not a label
    (malformed, oversized, not an object) is left out and listed with its reason, never a failed evaluation."""
    labels, refused = read_labels(lake, model)
    labelled = [x for x in labels if isinstance(x.get("checker_correct"), bool)]  # "false" is no verdict
    rates = checker_rates(labels, confidence)
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
            "checker_rates": rates, "refused_labels": len(refused), "refused_examples": refused[:REFUSED_SHOWN]}
