"""Reviewers' label files are read line by line within bounds: a bad line is left out with its reason; the queue they
label is drawn as ``evaluate.review_selection`` says."""

import json

import pytest

from aigc.config import EvaluateConfig, EvaluationGateThresholds
from aigc.evaluate.review import agreement, calibrated, calibration_text, checker_rates
from aigc.evaluate.stage import review_pool
from aigc.lake import LocalLake
from aigc.workloads.image.evaluation import review_lines


def test_a_poisoned_labels_file_costs_its_bad_lines_not_the_evaluation(tmp_path):
    lake = LocalLake(tmp_path)
    good = [{"prompt_id": f"p{i}", "checker_correct": True, "human_correct": i % 4 != 0} for i in range(8)]
    bad = [b"[" * 30_000 + b"]" * 30_000, b'{"human_correct": true, "n": ' + b"9" * 5000 + b"}",
           json.dumps({"note": "x" * 100_000}).encode(), b"[1, 2]", b'{"unterminated": ']
    lines = [json.dumps(g).encode() for g in good[:4]] + bad + [json.dumps(g).encode() for g in good[4:]]
    lake.put_bytes("evaluations/m/labels/alice.jsonl", b"\n".join(lines) + b"\n")
    got = agreement(lake, "m")
    assert (got["labelled"], got["human_agreement"]) == (8, 0.75)
    assert got["refused_labels"] == 5
    assert [r["line"] for r in got["refused_examples"]] == [5, 6, 7, 8, 9]
    assert [r["reason"] for r in got["refused_examples"]] == ["malformed_json", "malformed_json", "record_too_large",
                                                               "malformed_json", "malformed_json"]


def test_a_random_queue_draws_as_many_at_random_seeded_by_the_run_and_the_judge_orders_only_those(tmp_path):
    assert review_pool(100, 8, "uncertain", 0, "run1") is None  # the judge chooses among all
    pool = review_pool(100, 8, "random", 0, "run1")
    assert len(set(pool)) == 8 and pool == sorted(pool) and pool == review_pool(100, 8, "random", 0, "run1")
    assert pool != review_pool(100, 8, "random", 0, "run2") and review_pool(5, 8, "random", 0, "run1") is None
    generated = [{"prompt_id": f"p{i}", "prompt": "a red circle", "seed": i, "image": b"png"} for i in range(10)]
    readings = [{"margin": 1.0 - i / 10, "read": {}, "all_correct": True} for i in range(10)]
    lake = LocalLake(tmp_path)
    lines = review_lines(lake, "evaluations/m/dt=2026-11-20/run=r1", generated, readings, 3, "r1", among=[0, 2, 4, 6])
    assert [x["prompt_id"] for x in lines] == ["p6", "p4", "p2"]  # the least certain of the pool, not of all
    assert [x["prompt_id"] for x in review_lines(lake, "e", generated, readings, 2, "r1")] == ["p9", "p8"]
    with pytest.raises(ValueError, match="review_selection must be one of"):
        EvaluateConfig(review_selection="cheapest")


def test_labels_of_randomly_drawn_outputs_measure_the_checkers_mistakes_and_correct_its_alignment():
    """Rogan–Gladen: a checker that calls 10 % of right outputs wrong and 20 % of wrong ones right reads 0.76 where
    the truth is 0.8; corrected by its rates, the estimate is 0.8 again, and the interval widens by their doubt.
    Labels of the least certain outputs (the active queue) do not measure the rates at all."""
    def labelled(human: bool, checker: bool, n: int, selection: str = "random") -> list[dict]:
        return [{"human_correct": human, "checker_correct": checker, "selection": selection}] * n

    labels = labelled(True, True, 90) + labelled(True, False, 10) + labelled(False, False, 80) + \
        labelled(False, True, 20) + labelled(False, True, 500, selection="uncertain") + \
        [{"human_correct": True, "checker_correct": "false", "selection": "random"}]  # no checker verdict: not counted
    rates = checker_rates(labels)
    assert (rates["labels"], rates["sensitivity"]["value"], rates["specificity"]["value"]) == (200, 0.9, 0.8)
    read = {"value": 0.76, "lo": 0.72, "hi": 0.80, "n": 648, "confidence": 0.95}
    fixed = calibrated(read, rates)
    assert fixed["value"] == pytest.approx(0.8) and fixed["lo"] < 0.8 < fixed["hi"]
    assert fixed["hi"] - fixed["lo"] > (0.80 - 0.72) / 0.7  # the sample's interval, widened by the rates' doubt
    assert fixed["labels"] == 200 and fixed["n"] == 648
    assert calibration_text(rates, fixed).startswith("from 200 randomly drawn labelled outputs, sensitivity 0.900 [")
    assert f"corrected by them 0.800 [{fixed['lo']:.3f}, {fixed['hi']:.3f}]" in calibration_text(rates, fixed)
    assert checker_rates(labels[-500:])["reason"].startswith("needs labels of randomly drawn outputs")
    assert calibrated(read, checker_rates(labels[-500:])) is None
    # A checker no better than a coin at one corner of the rates' intervals: nothing can be said.
    coin = checker_rates(labelled(True, True, 2) + labelled(True, False, 1) + labelled(False, False, 1) +
                         labelled(False, True, 1))
    assert calibrated(read, coin)["lo"] == 0.0 and calibrated(read, coin)["hi"] == 1.0


def test_gate_5_fails_a_model_the_checker_overrates_once_the_labels_show_it_and_says_what_turns_it_off():
    from aigc.config import PipelineConfig
    from aigc.quality.evaluation import alignment_checks

    def gate(fixed: dict | None, on: bool = True) -> dict:
        metrics = {"intervals": {"alignment": None, "model_alignment": None, "model_alignment_calibrated": fixed},
                   "generated": 0, "review": {"checker_rates": {"sensitivity": {"value": 0.9, "lo": 0.8, "hi": 0.95,
                                                                                "n": 100, "confidence": 0.95},
                                                               "specificity": {"value": 0.3, "lo": 0.2, "hi": 0.4,
                                                                               "n": 50, "confidence": 0.95}}}}
        t = PipelineConfig().override({"evaluate_gate": {"calibrate_alignment": on}}).evaluate_gate
        return {c.column: c for c in alignment_checks(metrics, t, ("day", "{figure}"), ("model", "{figure}"))}

    low = {"value": 0.5, "lo": 0.3, "hi": 0.7, "n": 648, "confidence": 0.95, "labels": 150}
    check = gate(low)["model_alignment_calibrated"]
    assert not check.passed and "150 randomly drawn outputs" in check.failure
    assert "evaluate_gate.calibrate_alignment" in check.failure and "specificity 0.300" in check.failure
    assert gate({**low, "hi": 0.95})["model_alignment_calibrated"].passed  # wide: not shown below, passes
    assert "model_alignment_calibrated" not in gate(low, on=False) and "model_alignment_calibrated" not in gate(None)
    # The switch the failure names, as a user gives it on the command line (a string "false" is not true).
    from aigc.cli import build_parser

    args = build_parser().parse_args(["evaluate", "--date", "2026-11-20", "--calibrate-alignment", "false"])
    assert args.evaluate_gate__calibrate_alignment is False
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--date", "2026-11-20", "--calibrate-alignment", "maybe"])
    with pytest.raises(ValueError, match="calibrate_alignment must be true or false"):
        EvaluationGateThresholds(calibrate_alignment="false")
