"""End to end as users run it: a real Airflow deployment (LocalExecutor) driven over its REST API and CLI.

One deployment serves every test here (starting one costs ~10 s, a smoke-sized run ~1 min):
the first run triggered through the REST API, and a user in Chromium triggering from the form
while a run of the same date comes in through the API (the two take turns), then looking at the
result in the AIGC view. Backfills run on the Celery stack (test_celery_stack.py): on PostgreSQL.
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
from tests.e2e.stack import DAG_ID, SMOKE_CONF, USER, published_runs, run_date

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]
ASSETS = {"aigc_curated_shapes": "publish_curated", "aigc_model_candidate": "publish_model",
          "aigc_model_deployable": "gate_deploy", "aigc_generations": "publish_content",
          "aigc_evaluations": "publish_content"}


def test_a_run_triggered_through_the_rest_api_publishes_every_stage(local_stack, primed_run):
    run_id, state = primed_run
    assert state == "success", f"{run_id} ended {state}; logs in {local_stack.logs} and {local_stack.home}/logs"
    run = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
    assert run["conf"] == SMOKE_CONF and run["run_type"] == "manual"
    date = run_date(run)
    lake = open_lake(local_stack.lake_uri)
    published = published_runs(lake, date)
    manifest = lake.get_json(f"curated/shapes/dt={date}/run={published['curated']}/_manifest.json")
    assert manifest["input_records"] == 300 == manifest["rows"] + sum(manifest["quarantined"].values())
    generations = lake.get_json(f"generations/shapes-cvae/dt={date}/run={published['generations']}/_MANIFEST.json")
    assert generations["generated"] == 24 and generations["rows"] == generations["prompts"]
    assert Registry(lake, "shapes-cvae").aliases()["aliases"]["production"]
    assert lake.list("leases") == []  # the teardown gave the date back

    # Assets: each stage's output is an asset, produced by the task that publishes it, with an event per run.
    assets = {a["name"]: a for a in local_stack.api("GET", "/api/v2/assets?limit=100")["assets"]}
    for name, producer in ASSETS.items():
        assert [t["task_id"] for t in assets[name]["producing_tasks"]] == [producer], name
    events = local_stack.api("GET", f"/api/v2/assets/events?source_run_id={quote(run_id)}&limit=100")["asset_events"]
    assert {e["name"] for e in events} == set(ASSETS)
    assert all(e["extra"].get("date") == date for e in events)

    # The evaluate task's extra link opens its report over HTTP, for signed-in users only.
    links = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/evaluate/links")
    report_url = links["extra_links"]["Evaluation report"]
    assert report_url.startswith(f"{local_stack.url}/aigc/") and report_url.endswith("/report.html")
    status, body = local_stack.get_page(report_url.removeprefix(local_stack.url))
    assert status == 200 and "Pareto" in body
    assert local_stack.get_page(report_url.removeprefix(local_stack.url), token="")[0] in (401, 403)


@pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))
def test_a_form_run_in_chromium_and_an_api_run_of_one_date_take_turns_and_the_view_shows_the_last(
        local_stack, primed_run):
    """A user triggers from the form (one value changed) while a run of the same date comes in through the
    REST API: the second waits for the first's lease, each publishes whole, and the AIGC view inside the
    Airflow UI shows the later run's gallery."""
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
        run = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{form_run}")
        assert run["conf"]["prompts"] == 16 and run["conf"]["preset"] == "smoke"  # the form's defaults + our change
        # The form's run holds the date's lease; a run of the same date (no logical date: today) arrives.
        local_stack.wait_until(lambda: any(t["task_id"] == "claim_partition" and t["state"] == "success"
                                           for t in local_stack.task_instances(form_run)), 600,
                               "the form's run to take the date's lease")
        api_run = local_stack.trigger(SMOKE_CONF, logical_date=None)
        assert local_stack.wait_for_runs([form_run, api_run], timeout=1200) == {form_run: "success",
                                                                                 api_run: "success"}
        spans = {}
        for run_id in (form_run, api_run):
            tis = {t["task_id"]: t for t in local_stack.task_instances(run_id) if t["map_index"] in (-1, 0)}
            # The run's writes happen between its lease being taken and given back.
            spans[run_id] = (tis["claim_partition"]["end_date"], tis["release_partition"]["start_date"])
        assert spans[form_run][1] <= spans[api_run][0], f"runs interleaved: {spans}"
        lake = open_lake(local_stack.lake_uri)
        date = dt.datetime.now(dt.UTC).date().isoformat()  # a run with no logical date belongs to today
        assert run_date(run) == date  # the form's logical date defaults to now
        # The API run replaced the form's partitions whole; the form's generation (16 prompts) is the previous.
        generations = resolve(lake, partition("generations", "shapes-cvae", date))
        replaced = generations["run_prefix"].replace(generations["run_id"], generations["previous_run_id"])
        assert lake.get_json(f"{replaced}/_MANIFEST.json")["generated"] == 16
        assert lake.get_json(f"{generations['run_prefix']}/_MANIFEST.json")["generated"] == 24
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
        evaluation = resolve(lake, partition("evaluations", "shapes-cvae", date))
        assert evaluation["run_id"] in gallery.get_attribute("src")  # the later run's report, not an older one
        chromium.until(lambda: chromium.driver.execute_script("return arguments[0].naturalWidth", gallery) > 0,
                       "the gallery to load")
        chromium.shot("04-latest-report-gallery")
    finally:
        chromium.close()
