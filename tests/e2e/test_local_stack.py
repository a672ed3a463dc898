"""End to end as users run it: a real Airflow deployment (LocalExecutor) driven over its REST API and CLI.

One deployment serves every test here (starting one costs ~10 s, a smoke-sized run ~1 min), and it
makes two runs of one date: one triggered through the REST API, and, while that one holds the date,
one a user triggers from the form in Chromium. The second waits for the first; each publishes whole;
the AIGC view shows the later. Backfills run on the Celery stack (test_celery_stack.py): on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pytest

from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import resolve
from aigc.registry import Registry
from tests.e2e import browser
from tests.e2e.stack import DAG_ID, SMOKE_CONF, USER, run_date

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]
ASSETS = {"aigc_curated_shapes": "publish_curated", "aigc_model_candidate": "publish_model",
          "aigc_model_deployable": "gate_deploy", "aigc_generations": "publish_content",
          "aigc_evaluations": "publish_content"}


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()  # a run with no logical date belongs to today


# Runs first: its form run must come while the API run (module fixture api_run) still holds the date.
@pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))
def test_a_form_run_in_chromium_waits_for_the_api_run_of_its_date_and_the_view_shows_the_later(
        local_stack, api_run):
    """A user triggers from the form (one value changed) while a run of the same date, triggered through
    the REST API, holds the date: the form's run waits for the other's lease, each publishes whole, and
    the AIGC view inside the Airflow UI shows the later run's gallery."""
    before = {r["dag_run_id"] for r in local_stack.runs()}
    chromium = browser.Browser(local_stack.url)
    try:
        chromium.open(f"/dags/{DAG_ID}")
        chromium.log_in(USER, local_stack.password())
        chromium.css("button[aria-label='Trigger Dag']").click()
        chromium.xpath("//*[normalize-space(text())='Deployment and generation']").click()  # a form section
        chromium.css("input[name=element_prompts]").send_keys("16")  # the one value changed
        chromium.shot("01-trigger-form")
        chromium.all_xpath("//button[normalize-space()='Trigger']")[-1].click()  # the form's, not the header's
        form_run = chromium.until(lambda: ({r["dag_run_id"] for r in local_stack.runs()} - before or {None}).pop(),
                                  "the form's run to appear")
        api_still_holds = local_stack.task_state(api_run, "release_partition") in (None, "scheduled", "queued")
        run = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{form_run}")
        assert run["conf"]["prompts"] == 16 and run["conf"]["preset"] == "smoke"  # the form's defaults + our change
        assert run_date(run) == today()  # the form's logical date defaults to now
        assert api_still_holds, "the API run gave its date back before the form's run came: nothing was tested"
        assert local_stack.wait_for_runs([api_run, form_run], timeout=1200) == {api_run: "success",
                                                                                form_run: "success"}
        spans = {}
        for run_id in (api_run, form_run):
            tis = {t["task_id"]: t for t in local_stack.task_instances(run_id) if t["map_index"] in (-1, 0)}
            # The run's writes happen between its lease being taken and given back.
            spans[run_id] = (tis["claim_partition"]["end_date"], tis["release_partition"]["start_date"])
        assert spans[api_run][1] <= spans[form_run][0], f"runs interleaved: {spans}"
        lake = open_lake(local_stack.lake_uri)
        # The form's run replaced the API run's partitions whole; the API run's generation (24 prompts) is
        # the previous one.
        generations = resolve(lake, partition("generations", "shapes-cvae", today()))
        replaced = generations["run_prefix"].replace(generations["run_id"], generations["previous_run_id"])
        assert lake.get_json(f"{replaced}/_MANIFEST.json")["generated"] == 24
        assert lake.get_json(f"{generations['run_prefix']}/_MANIFEST.json")["generated"] == 16
        assert lake.list("leases") == []

        chromium.open(f"/dags/{DAG_ID}/runs/{form_run}")
        chromium.until(lambda: chromium.xpath("//*[contains(normalize-space(.), 'Success')]"), "the run page")
        chromium.shot("02-run-succeeded")
        # The AIGC view inside the Airflow UI: the nav entry opens it in a frame.
        chromium.open("/")
        chromium.xpath("//a[normalize-space(.)='AIGC'] | //button[normalize-space(.)='AIGC']").click()
        frame = chromium.until(lambda: chromium.css("iframe"), "the AIGC view's frame")
        chromium.until(lambda: "AIGC" in frame.get_attribute("src") or "/aigc" in frame.get_attribute("src"),
                       "the frame to point at the view")
        chromium.shot("03-aigc-view-in-the-ui")
        # Its latest report shows the later run's gallery, loaded over HTTP from the lake.
        chromium.open("/aigc/latest")
        gallery = chromium.until(lambda: chromium.css("img[src*='gallery.png']"), "the gallery image")
        evaluation = resolve(lake, partition("evaluations", "shapes-cvae", today()))
        assert evaluation["run_id"] in gallery.get_attribute("src")  # the later run's report, not an older one
        chromium.until(lambda: chromium.driver.execute_script("return arguments[0].naturalWidth", gallery) > 0,
                       "the gallery to load")
        chromium.shot("04-latest-report-gallery")
    finally:
        chromium.close()


def test_a_run_triggered_through_the_rest_api_publishes_every_stage_and_says_so_in_its_asset_events(
        local_stack, api_run):
    state = local_stack.wait_for_runs([api_run])[api_run]
    assert state == "success", f"{api_run} ended {state}; logs in {local_stack.logs} and {local_stack.home}/logs"
    run = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{api_run}")
    assert run["conf"] == SMOKE_CONF and run["run_type"] == "manual"

    # Assets: each stage's output is an asset, produced by the task that publishes it, with an event per run
    # that says what it published (a later run of the date, the browser test's, may have replaced it since).
    assets = {a["name"]: a for a in local_stack.api("GET", "/api/v2/assets?limit=100")["assets"]}
    for name, producer in ASSETS.items():
        assert [t["task_id"] for t in assets[name]["producing_tasks"]] == [producer], name
    events = local_stack.api("GET", f"/api/v2/assets/events?source_run_id={quote(api_run)}&limit=100")["asset_events"]
    assert {e["name"] for e in events} == set(ASSETS)
    assert all(e["extra"].get("date") == today() for e in events)
    extra = {e["name"]: e["extra"] for e in events}
    lake = open_lake(local_stack.lake_uri)
    curated = f"curated/shapes/dt={today()}/run={extra['aigc_curated_shapes']['run_id']}"
    manifest = lake.get_json(f"{curated}/_manifest.json")
    assert manifest["input_records"] == 300 == manifest["rows"] + sum(manifest["quarantined"].values())
    generations = extra["aigc_generations"]["generations_uri"].removeprefix(lake.uri.rstrip("/") + "/")
    manifest = lake.get_json(f"{generations}/_MANIFEST.json")
    assert manifest["generated"] == 24 and manifest["rows"] == manifest["prompts"]
    assert Registry(lake, "shapes-cvae").aliases()["aliases"]["production"]

    # The evaluate task's extra link opens its report over HTTP, for signed-in users only.
    links = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{api_run}/taskInstances/evaluate/links")
    report_url = links["extra_links"]["Evaluation report"]
    assert report_url.startswith(f"{local_stack.url}/aigc/") and report_url.endswith("/report.html")
    status, body = local_stack.get_page(report_url.removeprefix(local_stack.url))
    assert status == 200 and "Pareto" in body
    assert local_stack.get_page(report_url.removeprefix(local_stack.url), token="")[0] in (401, 403)
