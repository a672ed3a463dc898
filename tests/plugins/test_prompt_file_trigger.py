"""The prompt-file watcher claims the files of every workload the deployment allows, each under its workload's
dataset, and names that workload in the event, so aigc_generate answers a text file with the text workload."""

from __future__ import annotations

import asyncio
import json

from aigc.lake import LocalLake
from aigc.stages import configure
from aigc_airflow.triggers import PromptFileTrigger

PROMPTS = "".join(json.dumps({"prompt_id": f"p-{i}", "prompt": f"Item {i}: a small red circle at the top."}) + "\n"
                  for i in range(3)).encode()


def fired(trigger: PromptFileTrigger) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


def test_a_file_under_each_workloads_dataset_fires_once_naming_its_workload(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    logs, shapes = configure("default", "text").prepare.dataset, configure("default", "image").prepare.dataset
    assert logs != shapes  # the two built-in workloads curate different datasets
    lake.put_bytes(f"prompts/{logs}/dt=2026-11-20/prompts.jsonl", PROMPTS)
    lake.put_bytes(f"prompts/{shapes}/dt=2026-11-21/prompts.jsonl", PROMPTS)
    trigger = PromptFileTrigger(workloads=["image", "text"], poll_s=0.01, lake_uri=lake.uri)
    events = [fired(trigger), fired(trigger)]
    by_workload = {e["params"]["workload"]: e for e in events}
    assert by_workload["text"]["prompts_key"] == f"prompts/{logs}/dt=2026-11-20/prompts.jsonl"
    assert by_workload["image"]["date"] == "2026-11-21"
    assert trigger.serialize()[1]["workloads"] == ["image", "text"]


def test_a_workload_that_cannot_be_resolved_is_left_out_and_the_others_still_fire(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    lake.put_bytes(f"prompts/{configure('default', 'text').prepare.dataset}/dt=2026-11-20/prompts.jsonl", PROMPTS)
    trigger = PromptFileTrigger(workloads=["not_installed:Nothing", "text"], poll_s=0.01, lake_uri=lake.uri)
    assert fired(trigger)["params"] == {"workload": "text"}
    assert set(trigger.datasets().values()) == {"text"}
