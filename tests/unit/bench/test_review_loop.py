"""bench/review_loop.py's simulated reviewers: they read the truth, err at the rate asked, and what they label is a
Label Studio JSON export this project imports cleanly (the issue's first "done when", without the two nights)."""

import json
import random

from aigc.evaluate import labelstudio
from aigc.lake import LocalLake

MODEL, DATE, RUN = "shapes-cvae", "2026-11-01", "20261101T000000000000Z-eval01"


def test_simulated_reviewers_label_a_queue_that_imports_cleanly_and_err_at_the_rate_asked(tmp_path, bench_module):
    review_loop = bench_module("review_loop")
    lake = LocalLake(tmp_path / "lake")
    queue = [{"run_id": RUN, "prompt_id": f"p{i}", "prompt": f"a red circle {i}", "seed": i, "selection": "random",
              "image": lake.url(f"evaluations/{MODEL}/dt={DATE}/run={RUN}/review/images/p{i}.png"),
              "checker_correct": i % 3 != 0, "checker_attributes": {"colour": True, "shape": i % 3 != 0},
              "human_correct": None} for i in range(300)]
    lake.put_bytes(labelstudio.queue_key(MODEL, DATE, RUN), "".join(json.dumps(x) + "\n" for x in queue).encode())
    out = labelstudio.export_queue(lake, MODEL, DATE, RUN)
    tasks = lake.get_json(out["tasks_uri"].removeprefix(lake.uri.rstrip("/") + "/"))
    by_id = {x["prompt_id"]: x for x in queue}

    truthful = review_loop.simulated_export(tasks, by_id, 0.0, random.Random(0))
    lake.put_bytes("review/shapes-cvae/inbox/truthful.json", json.dumps(truthful).encode())
    imported = labelstudio.import_export(lake, MODEL, "review/shapes-cvae/inbox/truthful.json")
    assert imported["labels"] == 300 and not imported["quarantined"]
    labels = [json.loads(x) for x in lake.get_bytes(imported["labels_uri"].removeprefix(lake.uri.rstrip("/") + "/"))
              .splitlines()]
    assert all(x["human_correct"] == x["checker_correct"] and x["selection"] == "random" for x in labels)

    sloppy = review_loop.simulated_export(tasks, by_id, 0.2, random.Random(1))
    flipped = sum(t["annotations"][0]["result"][0]["value"]["choices"] != (["right"] if by_id[t["data"]["prompt_id"]]
                                                                            ["checker_correct"] else ["wrong"])
                  for t in sloppy)
    assert 30 <= flipped <= 90  # 20 % of 300 is 60; a binomial 95 % range is about 46–74
