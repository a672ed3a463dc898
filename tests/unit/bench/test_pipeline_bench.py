"""B7's arithmetic: the time some task was running, and the table's rows and verdicts."""

from __future__ import annotations

import datetime as dt


def _span(name, start_s, end_s):
    t0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    return (name, t0 + dt.timedelta(seconds=start_s), t0 + dt.timedelta(seconds=end_s))


def test_busy_time_counts_overlapping_and_nested_spans_once_and_leaves_the_gaps_out(bench_module):
    bench = bench_module("pipeline_bench")
    spans = [_span("a", 0, 10), _span("b[0]", 12, 20), _span("b[1]", 13, 25), _span("c", 14, 16),
             _span("d", 30, 31)]
    assert bench.busy_seconds(spans) == 10 + 13 + 1
    measured = bench.split(40.0, spans)
    assert measured["gaps_s"] == 40 - 24 and measured["tasks"] == 5
    assert list(measured["longest_tasks_s"]) == ["b[1]", "a", "b[0]"]


def test_the_table_reads_overhead_against_the_cli_and_the_demo_time_goal(bench_module):
    summary = bench_module("summary")

    def stats(value):
        return {"median": value, "min_max": [value, value], "runs": 3}

    smoke = {"preset": "smoke", "summary": {
        "cli": {"wall_s": stats(40.0)},
        "dags-test": {"wall_s": stats(36.0), "busy_s": stats(27.0), "gaps_s": stats(9.0),
                      "overhead_vs_cli": stats(-0.10)},
        "scheduler": {"wall_s": stats(66.0), "busy_s": stats(46.0), "gaps_s": stats(20.0),
                      "overhead_vs_cli": stats(0.65)}}}
    rows = summary.pipeline_rows(smoke)
    assert [r[-1] for r in rows] == ["met", "MISSED"] and "+65%" in rows[1][4]
    demo = {"preset": "demo", "summary": {"dags-test": {"wall_s": stats(390.0), "busy_s": stats(380.0),
                                                        "gaps_s": stats(10.0)}}}
    (row,) = summary.pipeline_rows(demo)
    assert row[4].startswith("6.5 min") and row[-1] == "MISSED"
