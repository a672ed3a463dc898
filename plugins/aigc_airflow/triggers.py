"""PromptFileTrigger: an asset watcher that fires once for each prompt file dropped in the lake.

It runs in the triggerer. Every ``poll_s`` it claims the next unclaimed ``prompts/<dataset>/dt=<date>/
prompts.jsonl`` (aigc.generate.prompts.claim_prompt_file: a conditional write, so two triggerers never
both fire for one file) and fires with the file's date and key; ``aigc_generate`` then generates for it
with the production model. A file dropped again with other content is claimed (and fired) again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent


class PromptFileTrigger(BaseEventTrigger):
    def __init__(self, dataset: str, poll_s: float = 15.0, lake_uri: str | None = None):
        super().__init__()
        self.dataset, self.poll_s, self.lake_uri = dataset, poll_s, lake_uri

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "aigc_airflow.triggers.PromptFileTrigger", {"dataset": self.dataset, "poll_s": self.poll_s,
                                                           "lake_uri": self.lake_uri}

    def _claim(self) -> dict | None:
        from aigc.generate.prompts import claim_prompt_file
        from aigc_airflow.runtime import open_task_lake

        return claim_prompt_file(open_task_lake(self.lake_uri), self.dataset)

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
                self.log.info("prompt file %s claimed for %s", claimed["prompts_uri"], claimed["date"])
                yield TriggerEvent(claimed)
                return
            await asyncio.sleep(self.poll_s)
