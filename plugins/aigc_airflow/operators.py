"""Custom operators: the quality gate that stands between a stage and its publication."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aigc_airflow.runtime import annotate_outlets, open_task_lake, pipeline_config


def _curated_gate(lake, cfg, prepared: dict) -> dict:
    from aigc.quality.curated import validate_curated

    return validate_curated(lake, cfg.prepare.dataset, prepared["date"], prepared["run_id"],
                            cfg.curated_gate, cfg.prepare)


def _training_gate(lake, cfg, trained: dict) -> dict:
    from aigc.quality.training import validate_training

    return validate_training(lake, cfg.model.name, trained["date"], trained["run_id"], cfg.train_gate)


def _deploy_gate(lake, cfg, registered: dict) -> dict:
    from aigc.quality.deploy import smoke_test

    return smoke_test(lake, cfg.model.name, registered["version"], cfg.deploy_gate, registered["date"])


def _generate_gate(lake, cfg, generated: dict) -> dict:
    from aigc.quality.generation import validate_generation

    return validate_generation(lake, generated, cfg, cfg.generate_gate)


def _evaluation_gate(lake, cfg, evaluated: dict) -> dict:
    from aigc.quality.evaluation import validate_evaluation

    return validate_evaluation(lake, evaluated, cfg.evaluate_gate)


GATES = {"curated": _curated_gate, "training": _training_gate, "deploy": _deploy_gate, "generate": _generate_gate,
         "evaluation": _evaluation_gate}


class QualityGateOperator(BaseOperator):
    """Run a Great Expectations gate on a stage's staging output; fail the task if it does not pass.

    ``prepared`` is the stage task's summary (an XComArg): it names the run to audit. The
    data is loaded when the task runs, never at DAG parse time. Results (JSON and Data Docs)
    are written to ``quality/<gate>/dt=<date>/run=<run_id>/`` in the lake either way.
    """

    template_fields: Sequence[str] = ("prepared",)
    ui_color = "#e8f4e8"

    def __init__(self, *, gate: str, prepared: Any, **kwargs):
        super().__init__(**kwargs)
        if gate not in GATES:
            raise ValueError(f"unknown gate {gate!r}; known gates: {sorted(GATES)}")
        self.gate = gate
        self.prepared = prepared

    def execute(self, context) -> dict:
        from aigc.quality import GateFailed

        cfg = pipeline_config(context["params"])
        try:
            result = GATES[self.gate](open_task_lake(), cfg, self.prepared)
        except GateFailed as e:
            # The same data fails the same expectations again: fail now, do not retry.
            raise AirflowFailException(str(e)) from e
        self.log.info("gate %s passed: data docs at %s", self.gate, result["data_docs_uri"])
        if self.outlets:  # a gate that publishes (the deployable model) says what it vouched for
            annotate_outlets(context, {**self.prepared, **result})
        return result
