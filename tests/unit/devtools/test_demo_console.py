"""``make demo``'s console: the few lines a person watching wants, from Airflow's task log."""

import io
from pathlib import Path

from aigc.devtools.demo import Console

# Lines of a real `airflow dags test aigc_pipeline` log (Airflow 3.3), in their order.
LOG = (Path(__file__).with_name("dags-test-sample.log")).read_text().splitlines()


def test_a_task_start_its_training_progress_its_end_and_a_gate_verdict_are_shown():
    out = io.StringIO()
    console = Console(out)
    for line in LOG:
        console.feed(line + "\n")
    shown = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the clock
    assert shown[0] == "▶ train"
    assert shown[1].startswith("    step 75/1500  loss 0.02512  val 0.18887 (step 0)")
    assert shown[2].startswith("✔ train success (")
    assert shown[3] == "    gate training: PASS (0 failure(s))"
    assert len(shown) == 4  # the state update itself is not a line of its own


def test_a_failed_task_and_its_error_are_shown():
    out = io.StringIO()
    console = Console(out)
    for line in (LOG[0], LOG[0].replace("[DAG TEST] starting", "x").replace("task_id=train map_index=-1", "")
                 + " new_state=failed", "ValueError: TrainConfig.steps must be in [1, 10000000], got 0",
                 LOG[3]):
        console.feed(line + "\n")
    text = out.getvalue()
    assert "ValueError: TrainConfig.steps must be in [1, 10000000], got 0" in text and "✘ train failed (" in text
