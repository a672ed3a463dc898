"""End to end as users run it: a real Airflow deployment (LocalExecutor) driven over its REST API and CLI.

One deployment serves every test here (starting one costs ~10 s, a smoke-sized run ~1 min):
the first run triggered through the REST API, two overlapping runs of one date,
backfills under each ``--reprocess-behavior``, and a user in Chromium triggering from the
form and looking at the result in the AIGC view.
"""

from __future__ import annotations

import datetime as dt
import json
from urllib.parse import quote

import pytest

from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import resolve
from aigc.registry import Registry
from tests.e2e import browser
from tests.e2e.stack import DAG_ID, SMOKE_CONF, STAGES, USER, published_runs

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]
ASSETS = {"aigc_curated_shapes": "publish_curated", "aigc_model_candidate": "publish_model",
          "aigc_model_deployable": "gate_deploy", "aigc_generations": "publish_content",
          "aigc_evaluations": "publish_content"}


def run_date(run: dict) -> str:
    return run["logical_date"][:10]


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


def test_overlapping_runs_of_one_date_take_turns(local_stack, primed_run):
    """Two runs with no logical date both belong to today: the second waits for the first's lease."""
    first = local_stack.trigger(SMOKE_CONF, logical_date=None)
    second = local_stack.trigger(SMOKE_CONF, logical_date=None)
    assert local_stack.wait_for_runs([first, second], timeout=1200) == {first: "success", second: "success"}
    spans = {}
    for run_id in (first, second):
        tis = {t["task_id"]: t for t in local_stack.task_instances(run_id) if t["map_index"] in (-1, 0)}
        # The run's writes happen between its lease being taken and given back.
        spans[run_id] = (tis["claim_partition"]["end_date"], tis["release_partition"]["start_date"])
    (a_start, a_end), (b_start, b_end) = sorted(spans.values())
    assert a_end <= b_start, f"runs interleaved: {spans}"
    lake = open_lake(local_stack.lake_uri)
    date = dt.datetime.now(dt.UTC).date().isoformat()
    pointer = resolve(lake, partition("curated", "shapes", date))
    assert pointer["previous_run_id"] is not None  # the later run replaced the earlier one, whole
    assert lake.list("leases") == []


def test_backfill_makes_one_partition_per_date_under_every_reprocess_behavior(local_stack, primed_run):
    dates = ["2026-11-01", "2026-11-02", "2026-11-03"]
    lake = open_lake(local_stack.lake_uri)

    def backfill(behavior: str, first: str, last: str) -> dict:
        before = {b["id"] for b in local_stack.api("GET", f"/api/v2/backfills?dag_id={DAG_ID}")["backfills"]}

        def created() -> list[dict]:
            return [b for b in local_stack.api("GET", f"/api/v2/backfills?dag_id={DAG_ID}")["backfills"]
                    if b["id"] not in before]

        for attempt in range(3):
            try:
                local_stack.cli("backfill", "create", "--dag-id", DAG_ID, "--from-date", first, "--to-date", last,
                                "--reprocess-behavior", behavior, "--max-active-runs", "2",
                                "--dag-run-conf", json.dumps(SMOKE_CONF))
                break
            except AssertionError as e:
                # SQLite answers a writer that would deadlock with the scheduler at once, without its busy
                # wait (seen in a fresh-clone run): the CLI's transaction rolled back, so it is retried.
                if "database is locked" not in str(e) or created() or attempt == 2:
                    raise
        (new,) = created()
        return local_stack.wait_until(
            lambda: (b := local_stack.api("GET", f"/api/v2/backfills/{new['id']}"))["completed_at"] and b,
            1200, f"backfill {new['id']} to complete", interval=5)

    def backfill_runs() -> dict[str, dict]:
        return {run_date(r): r for r in local_stack.runs() if r["run_type"] == "backfill"}

    backfill("none", dates[0], dates[-1])
    runs = backfill_runs()
    assert sorted(runs) == dates and {r["state"] for r in runs.values()} == {"success"}
    first = {d: published_runs(lake, d) for d in dates}
    for d in dates:  # exactly one run folder per stage and date: nothing appended
        assert [k for k in lake.list(f"curated/shapes/dt={d}") if k.endswith("_manifest.json")] == [
            f"curated/shapes/dt={d}/run={first[d]['curated']}/_manifest.json"]

    # Nothing to redo: `none` skips dates that have runs, `failed` finds no failed ones.
    for behavior in ("none", "failed"):
        backfill(behavior, dates[0], dates[-1])
        assert {d: r["dag_run_id"] for d, r in backfill_runs().items()} == {d: runs[d]["dag_run_id"] for d in dates}
        assert {d: published_runs(lake, d) for d in dates} == first

    # `completed` redoes a date: its partitions are replaced whole, the other dates untouched.
    backfill("completed", dates[-1], dates[-1])
    assert backfill_runs()[dates[-1]]["state"] == "success"
    again = {d: published_runs(lake, d) for d in dates}
    assert again[dates[0]] == first[dates[0]] and again[dates[1]] == first[dates[1]]
    for stage, dataset in STAGES:
        pointer = resolve(lake, partition(stage, dataset, dates[-1]))
        assert pointer["run_id"] != first[dates[-1]][stage] and pointer["previous_run_id"] == first[dates[-1]][stage]
    manifest = lake.get_json(f"curated/shapes/dt={dates[-1]}/run={again[dates[-1]]['curated']}/_manifest.json")
    assert manifest["input_records"] == 300  # the same drop, prepared again: not appended to the first
    assert lake.list("leases") == []


@pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))
def test_a_user_triggers_from_the_form_in_chromium_and_sees_the_gallery_in_the_aigc_view(local_stack, primed_run):
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
        run_id = chromium.until(lambda: ({r["dag_run_id"] for r in local_stack.runs()} - before or {None}).pop(),
                                "the form's run to appear")
        assert local_stack.wait_for_runs([run_id])[run_id] == "success"
        run = local_stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        assert run["conf"]["prompts"] == 16 and run["conf"]["preset"] == "smoke"  # the form's defaults + our change
        chromium.open(f"/dags/{DAG_ID}/runs/{run_id}")
        chromium.until(lambda: chromium.xpath("//*[contains(normalize-space(.), 'Success')]"), "the run page")
        chromium.shot("02-run-succeeded")

        lake = open_lake(local_stack.lake_uri)
        generations = resolve(lake, partition("generations", "shapes-cvae", run_date(run)))
        assert lake.get_json(f"{generations['run_prefix']}/_MANIFEST.json")["generated"] == 16
        # The AIGC view inside the Airflow UI: the nav entry opens it in a frame.
        chromium.open("/")
        chromium.xpath("//a[normalize-space(.)='AIGC'] | //button[normalize-space(.)='AIGC']").click()
        frame = chromium.until(lambda: chromium.css("iframe"), "the AIGC view's frame")
        chromium.until(lambda: "AIGC" in frame.get_attribute("src") or "/aigc" in frame.get_attribute("src"),
                       "the frame to point at the view")
        chromium.shot("03-aigc-view-in-the-ui")
        # Its latest report shows this run's gallery, loaded over HTTP from the lake.
        chromium.open("/aigc/latest")
        gallery = chromium.until(lambda: chromium.css("img[src*='gallery.png']"), "the gallery image")
        evaluation = resolve(lake, partition("evaluations", "shapes-cvae", run_date(run)))
        assert evaluation["run_id"] in gallery.get_attribute("src")  # this run's report, not an older one
        chromium.until(lambda: chromium.driver.execute_script("return arguments[0].naturalWidth", gallery) > 0,
                       "the gallery to load")
        chromium.shot("04-latest-report-gallery")
    finally:
        chromium.close()
