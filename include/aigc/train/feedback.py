"""Reviewers' labels as training signal: what the next training window does with the outputs they judged.

A label (``aigc.evaluate.review``: a review queue line with ``human_correct``) says whether the model's output for a
prompt was right. The curated records it traces to are the window's samples whose prompt column (the workload's
``Workload.prompt_column``: the image workload's caption) is the labelled prompt, compared normalised (lower case,
runs of white space as one). ``TrainConfig.review_feedback`` says what the next run does with them:

- ``off``: nothing (no label is read);
- ``upweight``: the samples of prompts reviewers judged wrong are seen ``review_upweight`` times per epoch;
- ``drop``: those samples leave the training split (the validation split, by a hash of the id, is never touched).

Only labels of evaluations dated before the run's date count (every queue line carries its evaluation's ``date``;
a label without a readable one is left out and counted), so a backfilled night never trains on what reviewers said
of later nights' outputs. Where one prompt was labelled more than once, its latest evaluation's labels decide, and
it is wrong if any of them says so (several seeds of one prompt). A run records
what it used (``record``: how many labels, from which review runs, what they did) in its summary, its model card's
lineage and its checkpoints, and a resumed run uses its checkpoint's labels, not what was imported since, so a
retry trains on the same data as the attempt it continues.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter

import numpy as np

from aigc.config.review_names import REVIEW_FEEDBACK
from aigc.evaluate.review import read_labels
from aigc.lake import Lake
from aigc.lake.keys import parse_date

PINNED_FIELDS = ("date", "run_id", "prompt_id", "prompt", "human_correct", "source")
"""What a run keeps of each label it used: enough to apply them again, and to name them."""


def normalised(prompt) -> str:
    return " ".join(str(prompt).lower().split())


def evaluated_on(label: dict) -> dt.date | None:
    """A label's evaluation date, or None where it has no readable one."""
    try:
        return parse_date(str(label.get("date")))
    except ValueError:
        return None


def labels_for(lake: Lake, model: str, date: dt.date) -> tuple[list[dict], int]:
    """(the model's labels of evaluations dated before ``date`` that name a prompt, each cut to ``PINNED_FIELDS``, in
    a fixed order; how many labels were left out for want of a readable date)."""
    labels = [x for x in read_labels(lake, model)[0] if x.get("prompt")]
    dated = [(day, x) for x in labels if (day := evaluated_on(x)) is not None]
    used = [{**{k: x.get(k) for k in PINNED_FIELDS}, "date": day.isoformat()} for day, x in dated if day < date]
    return sorted(used, key=lambda x: (x["date"], str(x["run_id"]), str(x["prompt_id"]))), len(labels) - len(dated)


def digest(labels: list[dict]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()


def verdicts(labels: list[dict]) -> dict[str, bool]:
    """Each labelled prompt (normalised): right, by its latest evaluation's labels, unless any of them says wrong."""
    latest: dict[str, tuple[str, str]] = {}
    for x in labels:
        p = normalised(x["prompt"])
        latest[p] = max(latest.get(p, ("", "")), (str(x["date"]), str(x["run_id"])))
    found: dict[str, bool] = {}
    for x in labels:
        p = normalised(x["prompt"])
        if (str(x["date"]), str(x["run_id"])) == latest[p]:
            found[p] = found.get(p, True) and x["human_correct"] is True
    return found


def apply(labels: list[dict], setting: str, factor: int, prompts: list, train_idx: np.ndarray) -> tuple[np.ndarray,
                                                                                                          dict]:
    """(the training sample indices as ``setting`` changes them, what changed). ``prompts``: every window sample's
    prompt column; ``train_idx``: the training split's indices into it."""
    verdict = verdicts(labels)
    failed = {p for p, right in verdict.items() if not right}
    hit = np.fromiter((normalised(prompts[i]) in failed for i in train_idx), dtype=bool, count=len(train_idx))
    matched = train_idx[hit]
    if setting == "upweight":
        # In order, each copy beside its sample: a split that keeps the stored order (round_robin, contiguous) and
        # cuts an epoch's tail would otherwise cut the copies first.
        changed = np.sort(np.concatenate([train_idx, np.repeat(matched, factor - 1)]))
    elif setting == "drop":
        changed = train_idx[~hit]
    else:
        raise ValueError(f"TrainConfig.review_feedback must be one of {REVIEW_FEEDBACK}, got {setting!r}")
    runs = Counter((str(x["date"]), str(x["run_id"])) for x in labels)
    record = {"setting": setting, "factor": factor if setting == "upweight" else None, "labels": len(labels),
              "review_runs": [{"date": d, "run_id": r, "labels": n} for (d, r), n in sorted(runs.items())],
              "sources": dict(Counter(str(x.get("source") or "jsonl") for x in labels)),
              "prompts_labelled": len(verdict), "prompts_wrong": len(failed),
              "prompts_wrong_in_window": len({normalised(prompts[i]) for i in matched}),
              "samples_matched": int(hit.sum()), "training_samples_before": len(train_idx),
              "training_samples_after": len(changed), "labels_sha256": digest(labels)}
    return changed, record
