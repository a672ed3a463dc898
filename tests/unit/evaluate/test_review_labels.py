"""Reviewers' label files are read line by line within bounds: a bad line is left out with its reason."""

import json

from aigc.evaluate.review import agreement
from aigc.lake import LocalLake


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
