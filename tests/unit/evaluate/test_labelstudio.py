"""The review queue out to Label Studio and its annotations back in (issue 44). The export's shape is Label Studio's
documented JSON export (labelstud.io/guide/task_format: ``id``, ``data``, ``annotations`` with ``result`` regions of
``from_name``, ``to_name``, ``type``, ``value``; ``was_cancelled``, ``completed_by``…), built here as Label Studio
writes it for the tasks we exported; no Label Studio server runs in the tests."""

import json

import pytest

from aigc.cli import main
from aigc.evaluate import labelstudio
from aigc.evaluate.review import agreement
from aigc.lake import LocalLake

MODEL, DATE, RUN = "shapes-cvae", "2026-11-20", "20261120T000000000000Z-eval01"
QUEUE = f"evaluations/{MODEL}/dt={DATE}/run={RUN}/review/queue.jsonl"


@pytest.fixture
def lake(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    lines = [{"run_id": RUN, "prompt_id": f"p{i}", "prompt": f"a red circle {i}", "seed": i,
              "image": lake.url(f"evaluations/{MODEL}/dt={DATE}/run={RUN}/review/images/p{i}.png"),
              "checker_margin": 0.1 * i, "checker_correct": i % 2 == 0, "human_correct": None,
              "checker_attributes": {"colour": True, "shape": i % 2 == 0}} for i in range(6)]
    lake.put_bytes(QUEUE, "".join(json.dumps(x) + "\n" for x in lines).encode())
    return lake


def annotation(n: int, choice, *, cancelled=False, by=1, **attributes):
    """One annotation as Label Studio exports it (the documented fields); ``attributes``: per-attribute choices."""
    value = {"choices": [choice]} if isinstance(choice, str) else choice
    regions = [("verdict", value)] + [(f"attribute_{a}", {"choices": [c]}) for a, c in attributes.items()]
    return {"id": 1000 + n, "result": [{"from_name": name, "id": f"r{n}-{k}", "to_name": "output",
                                        "type": "choices", "value": v, "origin": "manual"}
                                       for k, (name, v) in enumerate(regions)],
            "was_cancelled": cancelled, "ground_truth": False, "created_at": "2026-11-21T09:00:00.000000Z",
            "updated_at": "2026-11-21T09:00:00.000000Z", "lead_time": 4.2, "result_count": 0, "task": n,
            "completed_by": by}


def exported(tasks: list[dict], annotations: dict[int, list]) -> list[dict]:
    """Label Studio's JSON export of our imported ``tasks``: its ids, our data and predictions, the annotations."""
    return [{"id": n + 1, "created_at": "2026-11-21T08:00:00.000000Z", "updated_at": "2026-11-21T09:00:00.000000Z",
             "project": 7, "data": t["data"], "predictions": t["predictions"], "annotations": annotations.get(n, [])}
            for n, t in enumerate(tasks)]


def test_a_queue_goes_out_as_tasks_and_its_labels_come_back_with_every_bad_one_quarantined_with_its_reason(lake):
    out = labelstudio.export_queue(lake, MODEL, DATE, RUN, image_base="http://airflow:8080/aigc/lake")
    tasks = json.loads(lake.get_bytes(out["tasks_uri"].removeprefix(lake.uri.rstrip("/") + "/")))
    assert out["tasks"] == len(tasks) == 6 and out["output"] == "image"
    first = tasks[0]
    assert first["data"] | {} == {"model": MODEL, "date": DATE, "run_id": RUN, "prompt_id": "p0",
                                  "prompt": "a red circle 0",
                                  "image": f"http://airflow:8080/aigc/lake/evaluations/{MODEL}/dt={DATE}/run={RUN}"
                                           f"/review/images/p0.png"}
    # The checker's verdict as a prediction a reviewer corrects, in the config's choice names.
    assert [(r["from_name"], r["value"]["choices"]) for r in first["predictions"][0]["result"]] == [
        ("verdict", ["right"]), ("attribute_colour", ["right"]), ("attribute_shape", ["right"])]
    assert tasks[1]["predictions"][0]["result"][0]["value"] == {"choices": ["wrong"]}
    config = lake.get_bytes(out["label_config_uri"].removeprefix(lake.uri.rstrip("/") + "/")).decode()
    assert '<Choices name="verdict" toName="output"' in config and '<Image name="output" value="$image"/>' in config
    assert '<Choices name="attribute_shape" toName="output"' in config and out["attributes"] == ["colour", "shape"]

    foreign = {"id": 99, "data": {"image": "https://example.com/1.jpg"}, "annotations": [annotation(99, "right")]}
    unknown = exported([{"data": {**first["data"], "prompt_id": "p-not-queued"}, "predictions": []}],
                       {0: [annotation(0, "right")]})[0]
    # A run id that would name a key outside the evaluations (as a hand-edited export might): never read.
    escaping = exported([{"data": {**first["data"], "run_id": "../../raw"}, "predictions": []}],
                        {0: [annotation(0, "right")]})[0]
    export = exported(tasks, {0: [annotation(0, "right", shape="right")],
                              1: [annotation(1, "right", shape="right")],  # p1: the checker said wrong, shape too
                              2: [annotation(2, "wrong", by=1), annotation(2, "wrong", by=2, colour="wrong")],
                              3: [annotation(3, "wrong", by=1, shape="right"),
                                  annotation(3, "wrong", by=2, shape="wrong")],  # they conflict on the shape
                              4: [annotation(4, {"choices": ["maybe"]})],
                              5: [annotation(5, "right", cancelled=True)]})  # skipped: no label, no error
    # Tasks of the wrong shapes (a hand-edited file): quarantined, never a crash of the import.
    odd = [{"id": 200, "data": ["not", "a", "dict"]}, {"id": 201, "data": first["data"], "annotations": 7}, "a task?"]
    lake.put_bytes("review/inbox/project-7.json", json.dumps([*export, foreign, unknown, escaping, *odd]).encode())
    found = labelstudio.import_export(lake, MODEL, "review/inbox/project-7.json")
    assert (found["tasks"], found["labels"], found["cancelled"]) == (12, 3, 1)
    assert found["quarantined"] == {"conflicting_labels": 1, "malformed_annotation": 2, "unknown_task": 5}
    key = found["labels_uri"].removeprefix(lake.uri.rstrip("/") + "/")
    labels = [json.loads(x) for x in lake.get_bytes(key).splitlines()]
    assert [(x["prompt_id"], x["human_correct"], x["checker_correct"]) for x in labels] == [
        ("p0", True, True), ("p1", True, False), ("p2", False, True)]  # the checker's verdict: the queue's
    assert labels[2]["annotators"] == ["1", "2"] and labels[0]["source"] == "label-studio"
    assert [x["human_attributes"] for x in labels] == [{"shape": True}, {"shape": True}, {"colour": False}]
    held = [json.loads(x) for x in lake.get_bytes(found["quarantine_uri"].removeprefix(
        lake.uri.rstrip("/") + "/")).splitlines()]
    assert [h["task"].get("id") if isinstance(h["task"], dict) else h["task"] for h in held] == [
        4, 5, 99, 1, 1, 200, 201, "a task?"] and all(h["detail"] for h in held)
    assert '"maybe"' in next(h for h in held if h["reason"] == "malformed_annotation")["detail"]
    # What reviewers said reaches the checker's agreement figure: 1 of the 3 labels agrees with it (p0).
    seen = agreement(lake, MODEL)
    assert (seen["labelled"], seen["human_agreement"]) == (3, round(1 / 3, 4))
    assert seen["refused_labels"] == 0  # the quarantine is not read as labels
    interval = seen["human_agreement_interval"]
    assert interval["n"] == 3 and interval["lo"] < 1 / 3 < interval["hi"]
    # …and per attribute, where a reviewer judged it: shape right twice (the checker agreed once), colour wrong
    # once (the checker said right).
    assert {a: (v["labelled"], v["value"]) for a, v in seen["by_attribute"].items()} == {
        "colour": (1, 0.0), "shape": (2, 0.5)}

    # The same export again: nothing new. A later export that labels p0 again: a duplicate, quarantined.
    assert labelstudio.import_export(lake, MODEL, "review/inbox/project-7.json")["already_imported"]
    lake.put_bytes("review/inbox/project-7b.json", json.dumps(exported(tasks, {0: [annotation(0, "wrong")]})).encode())
    again = labelstudio.import_export(lake, MODEL, "review/inbox/project-7b.json")
    assert (again["labels"], again["quarantined"]) == (0, {"duplicate_label": 1})
    assert agreement(lake, MODEL)["labelled"] == 3


@pytest.mark.parametrize("content, says", [
    (b"not json", "not JSON"), (b'{"data": {}}', "not a list of tasks"), (b"[" + b" " * 200 + b"]", "more than")])
def test_a_file_that_is_no_export_is_refused_whole_with_what_to_do_and_nothing_is_written(lake, monkeypatch,
                                                                                           content, says):
    monkeypatch.setattr(labelstudio, "MAX_EXPORT_BYTES", 100)
    lake.put_bytes("review/inbox/bad.json", content)
    with pytest.raises(labelstudio.BadExport, match=says) as e:
        labelstudio.import_export(lake, MODEL, "review/inbox/bad.json")
    assert "Export" in str(e.value) or "split" in str(e.value)
    assert not lake.list(f"evaluations/{MODEL}/labels")


def test_the_cli_exports_and_imports_and_refuses_an_export_outside_the_lake(lake, tmp_path, capsys):
    common = ["--lake", lake.uri, "--date", DATE, "--name", MODEL]
    assert main(["review", "export", "--evaluation-run", RUN, *common]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["tasks"] == 6 and out["tasks_uri"].startswith(lake.uri)
    tasks = json.loads(lake.get_bytes(out["tasks_uri"].removeprefix(lake.uri.rstrip("/") + "/")))
    lake.put_bytes("review/inbox/p.json", json.dumps(exported(tasks, {0: [annotation(0, "wrong")]})).encode())
    assert main(["review", "import", "--export", lake.url("review/inbox/p.json"), *common]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["labels"] == 1
    # Without --export: every export in the inbox not imported yet; one that is no export is named, not fatal.
    lake.put_bytes(f"review/{MODEL}/inbox/a.json", json.dumps(exported(tasks, {1: [annotation(1, "right")]})).encode())
    lake.put_bytes(f"review/{MODEL}/inbox/b.json", b"id,verdict\n1,right\n")
    assert main(["review", "import", *common]) == 0
    pending = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (pending["exports"], pending["imported"], pending["labels"], pending["refused"]) == (2, 1, 1, 1)
    assert main(["review", "import", *common]) == 0  # again: nothing new
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["imported"] == 0
    # …and neither export is read again: both are unchanged since (their versions are recorded).
    assert main(["review", "import", *common]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["exports"], again["unchanged"], again["by_export"]) == (2, 2, {})
    assert lake.exists(f"review/{MODEL}/inbox/a.json")  # the reviewers' file stays
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("[]")
    assert main(["review", "import", "--export", str(elsewhere), *common]) != 0
    assert "is not in the lake" in capsys.readouterr().err


def test_reviewers_who_disagree_with_the_checker_on_an_attribute_fail_gate_5_on_it_and_few_labels_do_not(lake):
    """The judge's judge: twelve labels that agree with the checker overall and on the shape but never on the
    colour (the checker misreads colour) fail gate 5's colour agreement, shown below the bar; two such labels
    do not (the interval cannot show it), and the bar at 0 asks nothing."""
    from aigc.config import PipelineConfig
    from aigc.quality.evaluation import alignment_checks

    def gate(n: int, bar: float | None = None) -> dict:
        labels = [{"run_id": RUN, "prompt_id": f"p{i}", "checker_correct": True, "human_correct": True,
                   "checker_attributes": {"colour": True, "shape": True},
                   "human_attributes": {"colour": False, "shape": True}} for i in range(n)]
        lake.put_bytes(f"evaluations/{MODEL}/labels/r.jsonl", "".join(json.dumps(x) + "\n" for x in labels).encode())
        metrics = {"intervals": {"alignment": None, "model_alignment": None}, "generated": 0,
                   "review": agreement(lake, MODEL)}
        t = PipelineConfig().override({"evaluate_gate": {"min_checker_agreement": bar}} if bar is not None
                                      else {}).evaluate_gate
        return {c.column: c for c in alignment_checks(metrics, t, ("day", "{figure}"), ("model", "{figure}"))}

    checks = gate(12)
    assert checks["checker_agreement"].passed and checks["checker_agreement_shape"].passed
    colour = checks["checker_agreement_colour"]
    assert not colour.passed and "on colour" in colour.failure and "min_checker_agreement" in colour.failure
    few = gate(2)["checker_agreement_colour"]
    assert few.passed and few.bound > 0.6  # 0 of 2: an interval that reaches past 0.6 does not show it below
    assert not any(c.startswith("checker_agreement") for c in gate(12, 0.0))
