"""Reviewers' labels change the next training window (issue 44): which samples they reach, what each setting does,
and what the run records of them."""

import datetime as dt
import json

import numpy as np
import pytest
import torch

from aigc.evaluate.review import training_labels_text, used_in_training
from aigc.lake import LocalLake
from aigc.lake.keys import join
from aigc.train import distributed as D
from aigc.train import feedback, loop
from aigc.train.artifacts import training_run_prefix
from aigc.train.checkpoint import ResumeMismatch, load_latest
from aigc.train.data import load_window
from aigc.workloads import workload_of
from tests.training_fixtures import DATE, tiny_config

SOLO = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
MODEL = "shapes-cvae"


def label(prompt, right, date="2026-11-19", run="20261119T000000000000Z-eval01", pid="p0", source=None):
    return {"date": date, "run_id": run, "prompt_id": pid, "prompt": prompt, "human_correct": right,
            "checker_correct": True, **({"source": source} if source else {})}


def write_labels(lake, name, lines):
    lake.put_bytes(f"evaluations/{MODEL}/labels/{name}.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())


def test_a_prompt_judged_wrong_reaches_its_samples_and_the_latest_label_of_a_prompt_is_its_verdict():
    prompts = ["A red  circle", "a blue square", "a red circle", "a green star", "a blue square"]
    train_idx = np.array([0, 1, 2, 3, 4])
    labels = [label("a red circle", False, date="2026-11-18", pid="p1"),
              label("A BLUE square", False, date="2026-11-18", pid="p2"),
              label("a blue square", True, date="2026-11-19", pid="p3"),  # reviewed again later: right now
              label("a yellow moon", False, pid="p4"),  # no sample of it in the window
              label("a green star", True, pid="p5"), label("a green star", False, pid="p6")]  # two seeds, one wrong
    up, record = feedback.apply(labels, "upweight", 3, prompts, train_idx)
    assert up.tolist() == [0, 0, 0, 1, 2, 2, 2, 3, 3, 3, 4]  # red circles and green stars, each copy beside it
    assert record.items() >= {"labels": 6, "prompts_labelled": 4, "prompts_wrong": 3, "prompts_wrong_in_window": 2,
                              "samples_matched": 3, "training_samples_before": 5, "training_samples_after": 11,
                              "factor": 3}.items()
    assert record["review_runs"] == [{"date": "2026-11-18", "run_id": "20261119T000000000000Z-eval01", "labels": 2},
                                     {"date": "2026-11-19", "run_id": "20261119T000000000000Z-eval01", "labels": 4}]
    dropped, record = feedback.apply(labels, "drop", 3, prompts, train_idx)
    assert dropped.tolist() == [1, 4] and record["training_samples_after"] == 2 and record["factor"] is None
    with pytest.raises(ValueError, match="review_feedback must be one of"):
        feedback.apply(labels, "sometimes", 3, prompts, train_idx)


def test_only_labels_of_evaluations_before_the_run_count_and_bad_lines_are_no_labels(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    write_labels(lake, "alice", [label("a red circle", False, date="2026-11-19"),
                                 label("a red circle", True, date="2026-11-20", pid="p9"),  # that night's: not yet
                                 {**label("a blue square", False), "date": None},  # no evaluation date: left out
                                 {**label("a blue square", False), "date": "2026-11-9"},  # not a date: left out
                                 {**label("", False), "pid": "p5"},  # no prompt to trace: no label here
                                 {**label("a green star", "false"), "prompt_id": "p7"},  # not a verdict: refused
                                 {**label("a red circle", None), "prompt_id": "p6"}])  # not labelled yet
    lake.put_bytes(f"evaluations/{MODEL}/labels/bob.jsonl", b"{not json\n")
    used, undated = feedback.labels_for(lake, MODEL, dt.date.fromisoformat(DATE))
    assert [(x["prompt"], x["date"]) for x in used] == [("a red circle", "2026-11-19")] and undated == 2


def train(lake, cfg, run_id="20261120T000000000000Z-label1"):
    torch.set_num_threads(1)
    return loop.train_rank(lake, DATE, cfg, run_id, SOLO, workload_of(cfg))


def test_a_training_run_upweights_the_samples_of_prompts_reviewers_rejected_and_names_the_labels(curated_lake):
    index = load_window(curated_lake, "shapes", DATE, 1, ["caption"])
    captions = index.columns["caption"]
    common = max(set(captions), key=captions.count)  # the window's most frequent caption: it has samples to reach
    write_labels(curated_lake, "label-studio-abc", [label(common, False, source="label-studio"),
                                                    label("a caption no sample has", False, pid="p2")])
    cfg = tiny_config(steps=6, eval_every=6, checkpoint_every=6, review_feedback="upweight", review_upweight=5)
    summary = train(curated_lake, cfg)
    used = summary["review_labels"]
    train_idx, _ = index.split(cfg.train.val_fraction, cfg.train.val_max)
    matched = sum(captions[i] == common for i in train_idx)
    assert matched > 0 and used["samples_matched"] == matched and used["labels"] == 2
    assert used["training_samples_after"] == len(train_idx) + 4 * matched
    assert used["sources"] == {"label-studio": 1, "jsonl": 1} and used["resumed_with_checkpoint_labels"] is False
    assert used["undated_left_out"] == 0
    prefix = training_run_prefix(MODEL, DATE, summary["run_id"])
    card = curated_lake.get_json(join(prefix, "model.json"))
    assert card["lineage"]["review_labels"] == used
    # What stage 5's report and the view say of it, from the version's record (its lineage is the card's).
    assert training_labels_text(used_in_training(card)) == (
        f"2 label(s) from 1 review run(s): 2 prompt(s) judged wrong, their {matched} samples seen ×5 (training "
        f"samples {len(train_idx)} → {len(train_idx) + 4 * matched})")
    assert [x["prompt"] for x in load_latest(curated_lake, prefix)[1]["review_labels"]] == [
        common, "a caption no sample has"]

    # Labels imported since: a retry of the same run keeps its checkpoint's, so it trains on the same data.
    write_labels(curated_lake, "later", [label("another caption", False, pid="p3")])
    again = train(curated_lake, cfg)
    assert again["review_labels"]["labels"] == 2 and again["review_labels"]["resumed_with_checkpoint_labels"]
    # Turned off, the same run would train the rest on a window the labels did not change: refused.
    with pytest.raises(ResumeMismatch, match="with review_feedback=off"):
        train(curated_lake, tiny_config(steps=6, eval_every=6, checkpoint_every=6))
    # A new run reads them, and with the setting off reads none.
    assert train(curated_lake, cfg, run_id="20261120T000000000000Z-label2")["review_labels"]["labels"] == 3
    off = tiny_config(steps=6, eval_every=6, checkpoint_every=6)
    assert train(curated_lake, off, run_id="20261120T000000000000Z-label3")["review_labels"] is None


def test_a_workload_whose_samples_carry_no_prompt_refuses_the_setting_with_the_fix(curated_lake, monkeypatch):
    cfg = tiny_config(review_feedback="drop")
    workload = workload_of(cfg)
    monkeypatch.setattr(type(workload), "prompt_column", None)
    with pytest.raises(ValueError, match=r"names no prompt column.*set review_feedback=off"):
        loop.train_rank(curated_lake, DATE, cfg, "20261120T000000000000Z-label4", SOLO, workload)


def test_the_setting_is_checked_where_it_is_given():
    with pytest.raises(ValueError, match="review_feedback must be one of"):
        tiny_config(review_feedback="yes")
    with pytest.raises(ValueError, match="review_upweight"):
        tiny_config(review_feedback="upweight", review_upweight=0)
