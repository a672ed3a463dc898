"""The AIGC Airflow plugin: registers the operator extra links so the UI shows them."""

from airflow.plugins_manager import AirflowPlugin

from aigc_airflow.evaluate_operator import ReportLink


class AigcPlugin(AirflowPlugin):
    name = "aigc"
    operator_extra_links = [ReportLink()]
