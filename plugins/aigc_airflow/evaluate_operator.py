"""EvaluateOperator: stage 5 from a task, with an extra link from the task to its report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from aigc_airflow.runtime import dag_run_scoped_id, hold_partition_or_fail, open_task_lake, pipeline_config, run_params


class ReportLink(BaseOperatorLink):
    """'Evaluation report' on the task: the report as the AIGC view serves it over HTTP.

    The operator keeps the report's lake URI (``report_uri``); the link maps its key to
    ``<[api] base_url>/aigc/lake/<key>`` (a root path when base_url is unset), which opens in
    the browser with the user's Airflow session. No report (the task has not finished): no link.
    """

    name = "Evaluation report"

    def get_link(self, operator: BaseOperator, *, ti_key) -> str:
        # Evaluated when the task finishes, on the same operator instance that ran execute().
        from aigc.catalog import report_key
        from aigc_airflow.view.urls import lake_object_url

        key = report_key(getattr(operator, "report_uri", None) or "")
        return lake_object_url(key) if key else ""


class EvaluateOperator(BaseOperator):
    """Measure the day's generation run (``generation``: stage 4's summary) and write the report; ``timings``: the
    variants timed on the GPU queue's worker (``EVALUATE.time_here``), recommended for as well."""

    template_fields: Sequence[str] = ("generation", "timings")
    operator_extra_links = (ReportLink(),)
    ui_color = "#e8eefc"

    def __init__(self, *, generation: Any, timings: Any = None, **kwargs):
        super().__init__(**kwargs)
        self.generation = generation
        self.timings = timings
        self.report_uri: str | None = None

    def execute(self, context) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from aigc.evaluate.metrics import NoScorer
        from aigc.stages import EVALUATE

        cfg = pipeline_config(run_params(context))  # first: refused values read and write nothing
        lake = open_task_lake()
        hold_partition_or_fail(context, lake)
        try:
            timings = self.timings if isinstance(self.timings, list) else [self.timings] if self.timings else []
            # Its GPUs are the GPU queue's task's to time, in a GPU slot: this task holds none.
            summary = EVALUATE.produce(lake, self.generation, cfg, run_id=dag_run_scoped_id(context, cfg, "evaluate"),
                                       timings=timings, time_local_gpus=False)
        except NoScorer as e:  # the same content is unreadable on a retry: say why now
            raise AirflowFailException(str(e)) from e
        self.report_uri = summary["report_uri"]
        self.log.info("evaluation report: %s", self.report_uri)
        return summary
