"""The AIGC view: a read-only FastAPI app over the lake, mounted by the plugin at ``/aigc``.

    GET /aigc/                   runs by date: each stage's published run and gate verdicts
    GET /aigc/dates/<date>       one date: curated counts, training, registry, gallery, report, gates
    GET /aigc/registry           versions, variants and eligibility, aliases and their history
    GET /aigc/latest             the newest published evaluation: metrics, Pareto plot, gallery
    GET /aigc/lake/<key>         a report, plot or gate result from the lake (files.py says which)
    GET /aigc/api/runs, /aigc/api/dates/<date>, /aigc/api/registry, /aigc/api/latest   the same as JSON

Every route requires an authenticated Airflow user with read access to the DAGs whose publications it shows
(auth.py). Lake reads are blocking, so the
routes are plain ``def``: FastAPI runs them in its thread pool, off the API server's event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from aigc.catalog import Catalog
from aigc.lake import Lake
from aigc.lake.keys import parse_date
from aigc_airflow.assets import STAGE_DAGS
from aigc_airflow.view import files, pages
from aigc_airflow.view.auth import ReaderDep, refused, require_reader
from aigc_airflow.view.markup import Urls, layout

# Pages carry no scripts; neither may a lake object served under Airflow's origin (a report is HTML
# written by a task). Images and styles only from here; framing only by the Airflow UI itself.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'self'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def default_lake() -> Lake:
    """The lake as the pipeline's tasks see it (``AIGC_LAKE_URI``, S3 through ``aws_default``)."""
    from aigc_airflow.runtime import open_task_lake

    return open_task_lake()


def _names(dataset: str | None, model: str | None) -> tuple[str, str]:
    """The dataset and model the view shows: those given, else the deployment's default workload's
    (``AIGC_DEFAULT_WORKLOAD``: the text workload's logs and logs-gpt, the image workload's shapes and shapes-cvae)."""
    from aigc.stages import configure
    from aigc_airflow.params import default_workload

    cfg = configure("default", default_workload())
    return dataset or cfg.prepare.dataset, model or cfg.model.name


def create_app(lake: Callable[[], Lake] = default_lake, dataset: str | None = None, model: str | None = None):
    """The view over the lake that ``lake()`` opens (once, at the first request)."""
    app = FastAPI(title="AIGC view", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(require_reader)])
    app.add_exception_handler(StarletteHTTPException, refused)
    opened: list[Catalog] = []
    lock = threading.Lock()

    def catalog() -> Catalog:
        with lock:  # open the lake once: for S3 that reads a connection from Airflow's DB
            if not opened:
                opened.append(Catalog(lake(), *_names(dataset, model)))
            return opened[0]

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    def page(request: Request, rendered: tuple[str, str], status_code: int = 200) -> HTMLResponse:
        title, body = rendered
        return HTMLResponse(layout(title, body, urls(request)), status_code=status_code)

    every_stage = tuple(STAGE_DAGS)

    @app.get("/", response_class=HTMLResponse)
    def runs(request: Request, reader: ReaderDep):
        reader.require(*every_stage)
        return page(request, pages.runs_page(catalog().runs(), urls(request)))

    @app.get("/dates/{date}", response_class=HTMLResponse)
    def day(request: Request, date: str, reader: ReaderDep):
        reader.require(*every_stage)
        data = catalog().day(_date(date))
        nothing = not any(data["published"].values()) and not any(data["gates"].values())
        return page(request, pages.day_page(data, urls(request)), status_code=404 if nothing else 200)

    @app.get("/registry", response_class=HTMLResponse)
    def registry(request: Request, reader: ReaderDep):
        reader.require("train", "deploy")
        return page(request, pages.registry_page(catalog().registry(), urls(request)))

    @app.get("/latest", response_class=HTMLResponse)
    def latest(request: Request, reader: ReaderDep):
        reader.require("generate", "evaluate")
        return page(request, pages.latest_page(catalog().latest_evaluation(), urls(request)))

    @app.get("/lake/{key:path}")
    def lake_object(key: str, reader: ReaderDep) -> Response:
        reader.require(files.stage_of(key))
        return files.lake_object(catalog().lake, key)

    @app.get("/api/runs")
    def api_runs(reader: ReaderDep) -> list[dict]:
        reader.require(*every_stage)
        return catalog().runs()

    @app.get("/api/dates/{date}")
    def api_day(date: str, reader: ReaderDep) -> dict:
        reader.require(*every_stage)
        return catalog().day(_date(date))

    @app.get("/api/registry")
    def api_registry(reader: ReaderDep) -> dict:
        reader.require("train", "deploy")
        return catalog().registry()

    @app.get("/api/latest")
    def api_latest(reader: ReaderDep) -> dict | None:
        reader.require("generate", "evaluate")
        return catalog().latest_evaluation()

    return app


def urls(request: Request) -> Urls:
    # root_path is where the API server mounted this app (``[api] base_url``'s path + /aigc).
    return Urls(request.scope.get("root_path", "").rstrip("/"))


def _date(value: str) -> str:
    try:
        return parse_date(value).isoformat()
    except ValueError as e:
        raise HTTPException(400, str(e)) from None
