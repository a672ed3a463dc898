"""The AIGC Airflow plugin: the "AIGC" view in the UI and the evaluate task's link to its report.

The view is a FastAPI app the API server mounts at ``/aigc`` (``fastapi_apps``) and the UI
shows in its navigation, in an iframe (``external_views``); see ``aigc_airflow/view``. Every
Airflow process loads this module, so the app is only named here and built at its first request.
"""

from airflow.plugins_manager import AirflowPlugin

from aigc_airflow.evaluate_operator import ReportLink
from aigc_airflow.view.lazy import LazyASGIApp
from aigc_airflow.view.urls import URL_PREFIX, nav_href


class AigcPlugin(AirflowPlugin):
    name = "aigc"
    operator_extra_links = [ReportLink()]
    fastapi_apps = [{"app": LazyASGIApp("aigc_airflow.view.app:create_app"), "url_prefix": URL_PREFIX,
                     "name": "AIGC view"}]
    external_views = [{"name": "AIGC", "href": nav_href(), "destination": "nav", "url_route": "aigc",
                       "nav_top_level": True}]
