"""Custom operators: the quality gate that stands between a stage and its publication."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aigc_airflow.runtime import (
    annotate_outlets,
    hold_partition_or_fail,
    open_task_lake,
    pipeline_config,
    run_params,
)


class QualityGateOperator(BaseOperator):
    """Run a stage's Great Expectations gate (aigc.stages) on its staging output; fail the task if it does not pass.

    ``prepared`` is the stage task's summary (an XComArg): it names the run to audit. The
    data is loaded when the task runs, never at DAG parse time. Results (JSON and Data Docs)
    are written to ``quality/<gate>/dt=<date>/run=<run_id>/`` in the lake either way.
    """

    template_fields: Sequence[str] = ("prepared",)
    ui_color = "#e8f4e8"

    def __init__(self, *, gate: str, prepared: Any, **kwargs):
        super().__init__(**kwargs)
        from aigc.stages import GATES  # the stage API has no heavy imports at module level

        if gate not in GATES:
            raise ValueError(f"unknown gate {gate!r}; known gates: {sorted(GATES)}")
        self.gate = gate
        self.prepared = prepared

    def execute(self, context) -> dict:
        from aigc.quality import GateFailed
        from aigc.stages import GATES

        cfg = pipeline_config(run_params(context))  # first: refused values read and write nothing
        lake = open_task_lake()
        hold_partition_or_fail(context, lake)  # gate 3 writes the registry, every gate writes its results
        try:
            result = GATES[self.gate].gate(lake, cfg, self.prepared)
        except GateFailed as e:
            # The same data fails the same expectations again: fail now, do not retry.
            raise AirflowFailException(str(e)) from e
        self.log.info("gate %s passed: data docs at %s", self.gate, result["data_docs_uri"])
        if self.outlets:  # a gate that publishes (the deployable model) says what it vouched for
            annotate_outlets(context, {**self.prepared, **result})
        return result
