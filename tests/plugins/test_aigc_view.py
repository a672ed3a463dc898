"""The AIGC view as the API server serves it: Airflow's auth in front, the lake's real content behind.

The app is mounted under ``/aigc`` in a parent FastAPI app, as ``airflow api-server`` mounts plugin
apps. Tokens come from Airflow's own auth manager (SimpleAuthManager, the default) and are validated
by Airflow's own ``get_user``. The one stand-in: Airflow keeps revoked tokens in its metadata DB, which
unit tests have none of, so a set plays that table (``RevokedToken.revoke``/``is_revoked``).
"""

import html
import os
import re
from types import SimpleNamespace
from urllib.parse import urljoin

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aigc.catalog import Catalog
from aigc.devices import device_class
from aigc.lake import LocalLake
from aigc_airflow.view.app import create_app
from aigc_airflow.view.markup import fmt
from tests.training_fixtures import DATE
from tests.unit.test_catalog import EVALUATION_RUN, TRAINING_RUN, publish_everything

RUN = f"evaluations/shapes-cvae/dt={DATE}/run={EVALUATION_RUN}"
PAGES = ["/aigc/", "/aigc/registry", "/aigc/latest", "/aigc/api/runs", f"/aigc/lake/{RUN}/report.html"]


@pytest.fixture
def airflow_auth(monkeypatch):
    """Airflow's configured auth manager, as the API server holds it; tokens made and checked by it."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.revoked_token import RevokedToken

    revoked: set[str] = set()
    monkeypatch.setattr(RevokedToken, "revoke", classmethod(lambda cls, jti, exp, session=None: revoked.add(jti)))
    monkeypatch.setattr(RevokedToken, "is_revoked", classmethod(lambda cls, jti, session=None: jti in revoked))
    monkeypatch.setattr(api_app._AuthManagerState, "instance", None)
    manager = api_app.create_auth_manager()
    viewer = SimpleAuthManagerUser(username="viewer", role="VIEWER")
    return SimpleNamespace(manager=manager, token=lambda **kw: manager.generate_jwt(viewer, **kw))


def view_client(lake, prefix: str = "/aigc") -> TestClient:
    api_server = FastAPI()
    api_server.mount(prefix, create_app(lambda: lake))
    return TestClient(api_server)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def small_lake(tmp_path):
    """A report and a plot the view serves, beside objects it must never serve."""
    lake = LocalLake(tmp_path / "lake")
    lake.put_bytes(f"{RUN}/report.html", b"<html><img src='pareto.png'></html>")
    lake.put_bytes(f"{RUN}/pareto.png", b"\x89PNG plot")
    lake.put_bytes(f"{RUN}/review/shard.parquet", b"PAR1 secret-parquet")
    lake.put_bytes(f"{RUN}/.tmp-half-written.html", b"secret-temp")
    lake.put_bytes("models/shapes-cvae/v0001/model.safetensors", b"secret-weights")
    lake.put_bytes("models/shapes-cvae/aliases.json", b'{"aliases": {}, "history": [], "secret": "registry"}')
    lake.put_bytes(f"raw/shapes/dt={DATE}/records-00000.jsonl", b'{"secret": "raw"}')
    lake.put_bytes(f"training/shapes-cvae/dt={DATE}/run=r/_rendezvous.json", b'{"secret": "host:29400"}')
    lake.put_bytes(f"training/shapes-cvae/dt={DATE}/run=r/_SUMMARY.json", b'{"secret": "summary"}')
    (tmp_path / "outside.json").write_text('{"secret": "outside the lake"}')
    os.symlink(tmp_path / "outside.json", lake.root / RUN / "planted.json")
    return lake


def test_airflow_loads_the_plugin_with_the_view_and_its_nav_entry():
    from airflow import plugins_manager

    from aigc_airflow.evaluate_operator import ReportLink

    assert not plugins_manager.get_import_errors()
    apps, _ = plugins_manager.get_fastapi_plugins()
    (view,) = [a for a in apps if a["name"] == "AIGC view"]
    # Mounted as a stand-in that builds the FastAPI view at its first request (see view/lazy.py).
    assert view["url_prefix"] == "/aigc" and isinstance(view["app"].app(), FastAPI)
    (info,) = [p for p in plugins_manager.get_plugin_info() if p["name"] == "aigc"]
    (nav,) = info["external_views"]
    assert nav["name"] == "AIGC" and nav["destination"] == "nav" and nav["url_route"] == "aigc"
    assert nav["href"] == f"{view['url_prefix']}/"  # the UI's iframe opens the mounted app
    assert [type(link) for link in plugins_manager.get_operator_extra_links()] == [ReportLink]
    # The app Airflow mounts is the guarded one.
    assert TestClient(view["app"]).get("/api/runs").status_code == 401


def test_only_users_airflow_authenticated_get_the_view(small_lake, airflow_auth):
    client = view_client(small_lake)
    good, expired = airflow_auth.token(), airflow_auth.token(expiration_time_in_seconds=-3600)
    from airflow.api_fastapi.auth.tokens import JWTGenerator

    forged = JWTGenerator(secret_key="not-airflows-secret", valid_for=300, audience="apache-airflow").generate(
        {"sub": "admin", "role": "ADMIN"})
    revoked = airflow_auth.token()
    airflow_auth.manager.revoke_token(revoked)  # what logging out does
    for path in PAGES:
        anonymous = client.get(path)
        assert (anonymous.status_code, anonymous.json()) == (401, {"detail": "Not authenticated"}), path
        assert client.get(path, headers=bearer(expired)).status_code == 401, path
        assert client.get(path, headers=bearer(forged)).status_code == 403, path
        assert client.get(path, headers=bearer(revoked)).status_code == 403, path
        assert client.get(path, headers=bearer(good)).status_code == 200, path
    # A browser with no session goes to Airflow's login page, which sends it back after login.
    browser = client.get("/aigc/registry", headers={"Accept": "text/html"}, follow_redirects=False)
    login = airflow_auth.manager.get_url_login(next_url="http://testserver/aigc/registry")
    assert browser.status_code == 303 and browser.headers["location"] == login
    # The UI's session cookie (what the nav iframe and a link in a new tab send) is enough.
    client.cookies.set("_token", good)
    page = client.get("/aigc/registry", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "Model registry" in page.text
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none': no scripts at all


def test_a_user_the_auth_manager_grants_no_aigc_dag_gets_403_from_every_route(small_lake, airflow_auth):
    """Authenticated is not enough: the view asks the auth manager for read access to the aigc DAGs (a user with
    no role reads no DAG in the simple auth manager, as a FAB role without DAG:aigc_* permissions would)."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    client = view_client(small_lake)
    outsider = airflow_auth.manager.generate_jwt(SimpleAuthManagerUser(username="outsider", role=None))
    for path in [*PAGES, f"/aigc/dates/{DATE}", f"/aigc/api/dates/{DATE}", "/aigc/api/registry",
                 "/aigc/api/latest", "/aigc/lake/models/shapes-cvae/aliases.json"]:
        refused = client.get(path, headers=bearer(outsider))
        assert refused.status_code == 403 and "AIGC" in refused.json()["detail"], path
        assert "secret" not in refused.text
        assert client.get(path, headers=bearer(airflow_auth.token())).status_code != 403, path
    # In a browser, logged in but not allowed: told so, not sent to the login page (which would send it back here).
    client.cookies.set("_token", outsider)
    page = client.get("/aigc/registry", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 403 and "location" not in page.headers


def test_each_page_needs_the_dags_whose_publications_it_shows():
    from starlette.exceptions import HTTPException

    from aigc_airflow.view.auth import Reader
    from aigc_airflow.view.files import stage_of

    assert [stage_of(k) for k in (f"{RUN}/report.html", "training/shapes-cvae/dt=2026-11-01/run=r/loss.png",
                                  "quality/curated/dt=2026-11-01/run=r/result.json",
                                  "generations/shapes-cvae/dt=2026-11-01/run=r/gallery.png")] == \
        ["evaluate", "train", "prepare", "generate"]
    evaluators = Reader(user=None, stages=frozenset({"generate", "evaluate"}))
    evaluators.require("evaluate")
    with pytest.raises(HTTPException) as e:
        evaluators.require("prepare", "train", "evaluate")
    assert e.value.status_code == 403 and "aigc_prepare, aigc_train" in e.value.detail


@pytest.mark.parametrize("key", [
    "evaluations/%2e%2e/models/shapes-cvae/v0001/model.safetensors",
    f"{RUN}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/models/shapes-cvae/aliases.json",
    "evaluations/shapes-cvae/..%2f..%2f..%2fmodels/shapes-cvae/aliases.json",
    "%2fetc%2fpasswd",
    "/etc/passwd",
    "C:/windows/win.ini",
    "evaluations%5c..%5cmodels%5cshapes-cvae%5caliases.json",
    f"{RUN}/report%00.html",
    "file:///etc/passwd",
])
def test_malformed_and_traversing_keys_are_refused(small_lake, airflow_auth, key):
    response = view_client(small_lake).get(f"/aigc/lake/{key}", headers=bearer(airflow_auth.token()))
    assert response.status_code == 400 and "secret" not in response.text


@pytest.mark.parametrize("key", [
    "models/shapes-cvae/v0001/model.safetensors",  # weights: outside the served roots
    "models/shapes-cvae/aliases.json",
    f"raw/shapes/dt={DATE}/records-00000.jsonl",
    f"{RUN}/review/shard.parquet",  # a served root, not a served type
    f"{RUN}/.tmp-half-written.html",  # a half-written object
    f"{RUN}/planted.json",  # a symlink out of the lake
    f"training/shapes-cvae/dt={DATE}/run=r/_rendezvous.json",  # the training nodes' endpoint
    f"training/shapes-cvae/dt={DATE}/run=r/_SUMMARY.json",
    f"{RUN}/missing.png",
])
def test_objects_the_view_does_not_serve_are_not_found(small_lake, airflow_auth, key):
    response = view_client(small_lake).get(f"/aigc/lake/{key}", headers=bearer(airflow_auth.token()))
    assert response.status_code == 404 and "secret" not in response.text


def test_a_report_and_what_it_references_are_served_with_their_types(small_lake, airflow_auth):
    client, headers = view_client(small_lake), bearer(airflow_auth.token())
    report = client.get(f"/aigc/lake/{RUN}/report.html", headers=headers)
    assert report.content == small_lake.get_bytes(f"{RUN}/report.html")
    assert report.headers["content-type"] == "text/html; charset=utf-8"
    plot = client.get(urljoin(str(report.url), "pareto.png"), headers=headers)  # as the browser resolves it
    assert plot.content == b"\x89PNG plot" and plot.headers["content-type"] == "image/png"
    assert plot.headers["x-content-type-options"] == "nosniff"


def test_links_follow_where_the_api_server_mounts_the_view(small_lake, airflow_auth):
    # With [api] base_url = http://host/af/ the API server mounts plugin apps under /af.
    page = view_client(small_lake, prefix="/af/aigc").get("/af/aigc/", headers=bearer(airflow_auth.token()))
    hrefs = re.findall(r'href="([^"]+)"', page.text)
    assert hrefs and all(h.startswith("/af/aigc/") for h in hrefs), hrefs


def test_the_pages_show_what_the_pipeline_published(deployed_lake, airflow_auth):
    done = publish_everything(deployed_lake)
    client, headers = view_client(deployed_lake), bearer(airflow_auth.token())
    catalog = Catalog(deployed_lake, "shapes", "shapes-cvae")

    def get(path: str) -> str:
        response = client.get(path, headers=headers)
        assert response.status_code == 200, (path, response.text)
        return response.text

    index = get("/aigc/")
    assert f'href="/aigc/dates/{DATE}"' in index
    for run_id in (done["curated"], done["rejected"], TRAINING_RUN, done["generated"]["run_id"], EVALUATION_RUN):
        assert run_id in index
    assert index.count('class="fail"') == 1 and done["rejected_failures"]
    for failure in done["rejected_failures"]:  # each failed expectation with its observed value
        assert html.escape(failure) in index

    day = get(f"/aigc/dates/{DATE}")
    manifest = catalog.published("curated", DATE)["summary"]
    assert f"<th>curated rows</th><td>{manifest['rows']}</td>" in day
    for reason, count in manifest["quarantined"].items():
        assert f"<td>{reason}</td><td>{count}</td>" in day
    summary = catalog.published("training", DATE)["summary"]
    assert f"<th>final validation loss</th><td>{fmt(summary['final_val_loss'])}</td>" in day
    assert "<td>fp32</td>" in day and re.search(r"<td>bf16</td>(<td>[^<]*</td>){3}<td>no</td>", day)
    # What the GPUs did, per run: on this CPU host nothing, and each run's facts say why instead of a figure.
    assert "<th>GPU</th><td>not recorded: no GPU telemetry beside this run (trained without the launcher" in day
    assert "<th>GPU</th><td>not recorded: no GPU: generation shard 0 ran on the CPU, so nothing was sampled" in day
    # What auto serves per device class (here only this CPU's), and the reviewers' labels (none yet).
    recommended = catalog.published("evaluations", DATE)["summary"]["recommended_by_device"]
    assert list(recommended) == [device_class("cpu")] and f"<th>recommended on {device_class('cpu')}</th>" in day
    assert "<th>review labels</th><td>none yet</td>" in day
    assert "<th>labels in its training</th><td>none (train.review_feedback off" in day
    images = re.findall(r'<img src="([^"]+)"', day)
    assert [i.rsplit("/", 1)[1] for i in images] == ["loss.png", "gallery.png"]
    for src in images:
        key = src.removeprefix("/aigc/lake/")
        assert client.get(src, headers=headers).content == deployed_lake.get_bytes(key)
    (report,) = [h for h in re.findall(r'href="([^"]+)"', day) if h.endswith("/report.html")]
    assert client.get(report, headers=headers).content == deployed_lake.get_bytes(f"{RUN}/report.html")
    for image in ("pareto.png", "gallery.png", "loss.png"):  # what report.html references, relative to itself
        served = client.get(urljoin(report, image), headers=headers)
        assert served.content == deployed_lake.get_bytes(f"{RUN}/{image}")
    docs = re.findall(r'href="([^"]+/data_docs/index.html)"', day)
    assert len(docs) == 6 and all(client.get(d, headers=headers).status_code == 200 for d in docs)

    registry = get("/aigc/registry")
    for move in catalog.registry()["history"]:
        assert html.escape(move["reason"]) in registry
    assert "<td>candidate</td><td>v0001</td>" in registry and "<td>production</td><td>v0001</td>" in registry

    latest = get("/aigc/latest")
    assert f'src="/aigc/lake/{RUN}/pareto.png"' in latest and f'src="/aigc/lake/{RUN}/gallery.png"' in latest
    assert f'href="/aigc/lake/{RUN}/report.html"' in latest


def test_the_json_api_and_the_evaluate_tasks_link(deployed_lake, airflow_auth, monkeypatch):
    from aigc_airflow.evaluate_operator import ReportLink

    done = publish_everything(deployed_lake)
    client, headers = view_client(deployed_lake), bearer(airflow_auth.token())
    catalog = Catalog(deployed_lake, "shapes", "shapes-cvae")
    assert client.get("/aigc/api/runs", headers=headers).json() == catalog.runs()
    assert client.get(f"/aigc/api/dates/{DATE}", headers=headers).json() == catalog.day(DATE)
    assert client.get("/aigc/api/dates/2026-13-01", headers=headers).status_code == 400
    assert client.get("/aigc/dates/2026-11-21", headers=headers).status_code == 404  # nothing for that date

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    link = ReportLink().get_link(SimpleNamespace(report_uri=done["published"]["report_uri"]), ti_key=None)
    assert link == f"/aigc/lake/{RUN}/report.html"
    assert client.get(link, headers=headers).content == deployed_lake.get_bytes(f"{RUN}/report.html")


def test_a_date_whose_evaluation_failed_gate_5_shows_why_and_links_its_report(deployed_lake, airflow_auth):
    from tests.unit.evaluate.test_evaluate import failed_evaluation

    evaluated = failed_evaluation(deployed_lake)
    client, headers = view_client(deployed_lake), bearer(airflow_auth.token())
    page = html.unescape(client.get(f"/aigc/dates/{DATE}", headers=headers).text)
    assert f"Latest evaluation {evaluated['run_id']} failed gate 5" in re.sub(r"<[^>]+>", "", page)
    assert "significantly below the minimum 0.99" in page
    report = f"/aigc/lake/evaluations/shapes-cvae/dt={DATE}/run={evaluated['run_id']}/report.html"
    assert f'href="{report}"' in page
    served = client.get(report, headers=headers)
    assert served.status_code == 200 and "Gate 5 FAILED" in served.text


def test_a_date_whose_gate_5_lacked_evidence_says_so_apart_from_failed(deployed_lake, airflow_auth):
    """Gate 5 read against a minimum (0.05) inside both alignments' intervals: every check that did not pass is
    undecided, and the date page says "not enough evidence", with what would draw more samples."""
    from aigc.quality.evaluation import validate_evaluation
    from aigc.quality.gate import GateFailed
    from aigc.workloads.image import IMAGE
    from tests.unit.evaluate.test_evaluate import LENIENT, config, evaluate, generate

    evaluated = evaluate(deployed_lake, generate(deployed_lake, config()), config(),
                         run_id="20261120T000000000000Z-undec1")
    near = LENIENT.override({"evaluate_gate": {"min_alignment": 0.05}})
    with pytest.raises(GateFailed):
        validate_evaluation(deployed_lake, evaluated, near, IMAGE)
    client, headers = view_client(deployed_lake), bearer(airflow_auth.token())
    page = re.sub(r"<[^>]+>", "", html.unescape(client.get(f"/aigc/dates/{DATE}", headers=headers).text))
    assert f"Latest evaluation {evaluated['run_id']} did not pass gate 5: not enough evidence yet" in page
    assert "not enough evidence: alignment of the day's content is 0.000 (98.3% interval 0.000–0.095, n = 48)" in page
    assert "allow more looks with" in page and "failed gate 5" not in page


def test_the_view_shows_the_deployments_default_workload(monkeypatch):
    """AIGC_DEFAULT_WORKLOAD=text: the view reads the text workload's partitions (logs, logs-gpt)."""
    from aigc_airflow.view.app import _names

    monkeypatch.delenv("AIGC_DEFAULT_WORKLOAD", raising=False)
    assert _names(None, None) == ("shapes", "shapes-cvae")  # none named: the first allowed, the image demo
    monkeypatch.setenv("AIGC_DEFAULT_WORKLOAD", "text")
    assert _names(None, None) == ("logs", "logs-gpt") and _names("mine", None) == ("mine", "logs-gpt")
