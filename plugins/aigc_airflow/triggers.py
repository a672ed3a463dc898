"""PromptFileTrigger: an asset watcher that fires once for each prompt file dropped in the lake.

It runs in the triggerer. Every ``poll_s`` it claims the next unclaimed ``prompts/<dataset>/dt=<date>/
prompts.jsonl`` (aigc.generate.prompts.claim_prompt_file: a conditional write, so two triggerers never
both fire for one file) of each workload the deployment allows (its dataset: the workload's default
configuration's), and fires with the file's date and key, and the workload whose dataset it is, as the run's
form value; ``aigc_generate`` then generates for it with that workload's production model. A file dropped again
with other content is claimed (and fired) again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent


class PromptFileTrigger(BaseEventTrigger):
    def __init__(self, workloads: list[str], poll_s: float = 15.0, lake_uri: str | None = None):
        super().__init__()
        self.workloads, self.poll_s, self.lake_uri = list(workloads), poll_s, lake_uri
        self._datasets: dict[str, str] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "aigc_airflow.triggers.PromptFileTrigger", {"workloads": self.workloads, "poll_s": self.poll_s,
                                                           "lake_uri": self.lake_uri}

    def datasets(self) -> dict[str, str]:
        """Each watched dataset and the workload whose it is, resolved here in the triggerer (not when a DAG file is
        parsed: a user's workload may import what a parse must not). A workload that cannot be resolved is logged
        and left out; the first workload named keeps a dataset two of them share."""
        if self._datasets is None:
            from aigc.stages import configure

            self._datasets = {}
            for name in self.workloads:
                try:
                    dataset = configure("default", name).prepare.dataset
                except Exception as e:  # noqa: BLE001 - one bad workload must not stop the others' prompt files
                    self.log.warning("not watching prompt files of workload %s: %s", name, e)
                    continue
                self._datasets.setdefault(dataset, name)
        return self._datasets

    def _claim(self) -> dict | None:
        from aigc.generate.prompts import claim_prompt_file
        from aigc_airflow.runtime import open_task_lake

        lake = open_task_lake(self.lake_uri)
        for dataset, workload in self.datasets().items():
            claimed = claim_prompt_file(lake, dataset)
            if claimed:
                return {**claimed, "params": {"workload": workload}}
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # One event, then return: the triggerer starts a watcher's trigger again (as Airflow's own file triggers
        # rely on), and the next call claims the next file.
        while True:
            try:
                claimed = await asyncio.to_thread(self._claim)
            except Exception:  # noqa: BLE001 - a lake hiccup must not stop the watcher: log it, poll again
                self.log.exception("could not look for prompt files; trying again in %s s", self.poll_s)
                claimed = None
            if claimed:
                self.log.info("prompt file %s claimed for %s (workload %s)", claimed["prompts_uri"], claimed["date"],
                              claimed["params"]["workload"])
                yield TriggerEvent(claimed)
                return
            await asyncio.sleep(self.poll_s)
