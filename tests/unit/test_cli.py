"""The ``aigc`` CLI: exit codes, the one-JSON-line summary on stdout, ``error:`` lines on stderr."""

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from aigc.cli import main
from aigc.workloads.image.rawdrop import DIRT_KINDS, REPAIRED_KINDS

DATE = "2026-11-28"
MAKE_RAW = ["make-raw", "--date", DATE, "--n", "300", "--seed", "1"]
PREPARE = ["prepare", "--date", DATE, "--min-rows", "100", "--workers", "1", "--drop", "synthetic"]


def last_json(stdout: str) -> dict:
    """The documented contract: whatever else is printed, the last stdout line is one JSON object."""
    summary = json.loads(stdout.rstrip("\n").splitlines()[-1])
    assert isinstance(summary, dict)
    return summary


def aigc(capsys, *argv: str) -> tuple[int, dict, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, last_json(out), err


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def make_prepare_status(capsys, lake: str) -> tuple[dict, dict, dict]:
    """The happy path, with the checks every backend must pass; returns the three summaries."""
    rc, made, _ = aigc(capsys, *MAKE_RAW, "--lake", lake)
    assert rc == 0 and made["ok"] is True and made["command"] == "make-raw"
    assert made["records"] == 300 and made["drop"] == f"{lake}/raw/_synthetic/shapes/dt={DATE}"
    assert sum(made["dirt"].values()) > 0 and set(made["dirt"]) <= set(DIRT_KINDS)
    # With this seed every unrepairable defect is quarantined and nothing else (no chance duplicates).
    expected_quarantined = sum(n for kind, n in made["dirt"].items() if kind not in REPAIRED_KINDS)

    rc, prep, _ = aigc(capsys, *PREPARE, "--lake", lake)
    assert rc == 0 and prep["ok"] is True and prep["published"] is True
    assert prep["input"] == 300 == prep["curated"] + prep["quarantined"]
    assert prep["quarantined"] == expected_quarantined == sum(prep["reasons"].values())
    run = prep["run_id"]
    assert prep["curated_uri"] == f"{lake}/curated/shapes/dt={DATE}/run={run}"
    assert prep["gate"] == f"{lake}/quality/curated/dt={DATE}/run={run}/result.json"

    rc, status, _ = aigc(capsys, "status", "--lake", lake, "--date", DATE)
    assert rc == 0 and status["ok"] is True
    assert (status["rows"], status["input"], status["run_id"]) == (prep["curated"], 300, run)
    assert status["quarantined"] == prep["reasons"] and status["gate_passed"] is True
    assert status["curated_uri"] == prep["curated_uri"]
    assert status["data_docs_uri"] == f"{lake}/quality/curated/dt={DATE}/run={run}/data_docs/index.html"
    return made, prep, status


def test_make_raw_prepare_status_on_a_local_lake(capsys, tmp_path):
    lake = (tmp_path / "lake").resolve().as_uri()
    _, prep, status = make_prepare_status(capsys, lake)
    assert Path(status["data_docs_uri"].removeprefix("file://")).is_file()

    # A later run that fails its gate leaves the published run in place.
    rc, failed, _ = aigc(capsys, *PREPARE, "--lake", lake, "--min-rows", "100000")
    assert rc == 1 and failed["ok"] is False
    rc, status, _ = aigc(capsys, "status", "--lake", lake, "--date", DATE)
    assert (status["run_id"], status["rows"]) == (prep["run_id"], prep["curated"]) and status["gate_passed"]


def test_make_raw_prepare_status_on_s3(capsys, monkeypatch, s3_server):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    lake = f"s3://{s3_server.bucket}/cli-{uuid.uuid4().hex[:12]}"
    make_prepare_status(capsys, lake)


def test_no_secret_reaches_the_output_or_the_logs_even_at_debug_level(capsys, caplog, monkeypatch, s3_server):
    """The S3 secret and session token: not in any line a command prints or logs (botocore's own debug included)."""
    import logging

    secret, token = f"sekrit-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # the local S3 server accepts any
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    lake = f"s3://{s3_server.bucket}/cli-{uuid.uuid4().hex[:12]}"
    caplog.set_level(logging.DEBUG)
    printed = []
    for argv in (MAKE_RAW, PREPARE, ("status", "--date", DATE)):
        rc = main(["--log-level", "DEBUG", *argv, "--lake", lake])
        out, err = capsys.readouterr()
        assert rc == 0, err[-2000:]
        printed.append(out + err)
    seen = "\n".join(printed) + "\n".join(r.getMessage() + repr(r.args) for r in caplog.records)
    assert len(caplog.records) > 20  # debug logging was on: the search had something to search
    leaks = sorted({r.name for r in caplog.records if secret in r.getMessage() + repr(r.args) or
                    token in r.getMessage() + repr(r.args)})
    assert secret not in seen and token not in seen, leaks


def test_a_command_refuses_a_date_a_dag_run_is_writing_and_releases_its_own(capsys, tmp_path):
    import datetime as dt

    from aigc.lake import LocalLake
    from aigc.lake.lease import date_lease

    lake = LocalLake(tmp_path / "lake")
    rc, _, _ = aigc(capsys, *MAKE_RAW, "--lake", lake.uri)
    lease = date_lease(lake, DATE)
    lease.hold("scheduled__2026-11-28T00:00:00+00:00", dt.timedelta(hours=1))  # a DAG run of the date
    rc, summary, err = aigc(capsys, *PREPARE, "--lake", lake.uri)
    assert rc == 1 and summary["ok"] is False
    assert error_line(err).startswith(f"error: DateBusy: {DATE} is being written by 'scheduled__2026-11-28T00:00:00")
    assert "try again once it has finished" in err
    assert not lake.list("curated") and not lake.list("quarantine")  # refused before writing anything
    lease.release("scheduled__2026-11-28T00:00:00+00:00")
    rc, summary, _ = aigc(capsys, *PREPARE, "--lake", lake.uri)
    assert rc == 0 and summary["published"] is True
    assert lease.holder() is None  # the command gave the date back


def test_a_command_whose_lease_was_taken_over_while_it_worked_publishes_nothing(capsys, tmp_path, monkeypatch):
    """Fails without the check before publishing: the command stalled past its lease (a long GC pause, a
    suspended laptop), a DAG run took the date over, and the command published over it anyway."""
    import datetime as dt

    from aigc.lake import LocalLake
    from aigc.lake.lease import date_lease
    from aigc.stages import PREPARE as STAGE

    lake = LocalLake(tmp_path / "lake")
    aigc(capsys, *MAKE_RAW, "--lake", lake.uri)
    real_gate = STAGE.gate

    def gate_then_lose_the_lease(*args, **kwargs):
        gated = real_gate(*args, **kwargs)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)  # the command's 5-minute lease has expired by then
        date_lease(lake, DATE).hold("scheduled__2026-11-28T00:00:00+00:00", dt.timedelta(hours=2), now=later)
        return gated

    monkeypatch.setattr(STAGE, "gate", gate_then_lose_the_lease)
    rc, summary, err = aigc(capsys, *PREPARE, "--lake", lake.uri)
    assert rc == 1 and error_line(err).startswith(f"error: DateBusy: {DATE} is being written by 'scheduled__")
    assert not lake.exists(f"curated/shapes/dt={DATE}/_PUBLISHED.json")  # staged, never published
    assert date_lease(lake, DATE).holder()["owner"].startswith("scheduled__")  # and its lease left alone


def test_make_raw_is_deterministic(capsys, tmp_path):
    _, a, _ = aigc(capsys, *MAKE_RAW, "--lake", str(tmp_path / "a"))
    _, b, _ = aigc(capsys, *MAKE_RAW, "--lake", str(tmp_path / "b"))
    assert a["dirt"] == b["dirt"] and a["repairable"] == b["repairable"]
    first = (tmp_path / "a/raw/_synthetic/shapes" / f"dt={DATE}" / "records-00000.jsonl").read_bytes()
    assert first == (tmp_path / "b/raw/_synthetic/shapes" / f"dt={DATE}" / "records-00000.jsonl").read_bytes()


def test_prepare_without_a_drop_fails_naming_the_missing_location(capsys, tmp_path):
    rc, summary, err = aigc(capsys, "prepare", "--lake", str(tmp_path), "--date", "2026-11-29")
    where = f"{tmp_path.resolve().as_uri()}/raw/shapes/dt=2026-11-29"
    assert rc == 1
    assert error_line(err).startswith(f"error: DropNotFound: no complete raw drop at {where}: found nothing")
    assert summary["ok"] is False and summary["command"] == "prepare"
    assert summary["error"] == error_line(err).removeprefix("error: ")


def test_a_synthetic_drop_has_its_own_root_and_never_goes_to_a_producers(capsys, tmp_path):
    lake = str(tmp_path / "lake")
    aigc(capsys, *MAKE_RAW, "--lake", lake)
    assert not (tmp_path / "lake/raw/shapes").exists()  # the producers' root is untouched
    rc, _, err = aigc(capsys, "prepare", "--lake", lake, "--date", DATE)  # the default preset: a producer's drop
    assert rc == 1 and "no complete raw drop at" in err and "/raw/shapes/dt=" in err
    assert "`aigc prepare --drop synthetic` prepares it" in err
    producer = tmp_path / "producer"
    rc, _, err = aigc(capsys, *PREPARE, "--lake", lake, "--raw", str(producer))
    assert rc == 1 and "a synthetic drop is written under" in error_line(err) and "never at a producer's" in err
    assert not producer.exists()


def _console_script() -> list[str]:
    # `pip install -e .` installs the script: its absence is an install defect, not a reason to skip.
    script = shutil.which("aigc", path=str(Path(sys.executable).parent))
    assert script is not None, f"no aigc console script beside {sys.executable}: run `make install`"
    return [script]


@pytest.mark.parametrize("command", [_console_script, lambda: [sys.executable, "-m", "aigc"]],
                         ids=["console-script", "python-m"])
def test_a_real_process_exits_1_with_the_error_on_stderr_and_json_on_stdout(command, tmp_path):
    proc = subprocess.run([*command(), "prepare", "--lake", str(tmp_path / "lake"), "--date", "2026-11-29"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert error_line(proc.stderr).startswith("error: DropNotFound: no complete raw drop at file://")
    assert "raw/shapes/dt=2026-11-29" in error_line(proc.stderr)
    assert proc.stdout.count("\n") == 1  # nothing but the summary on stdout
    assert last_json(proc.stdout)["ok"] is False
    assert not (tmp_path / ".lake").exists()  # --lake was honoured, no default lake appeared


def test_a_failed_gate_exits_1_names_the_expectation_and_publishes_nothing(capsys, tmp_path):
    lake = str(tmp_path / "lake")
    _, made, _ = aigc(capsys, *MAKE_RAW, "--lake", lake)
    curated = 300 - sum(n for kind, n in made["dirt"].items() if kind not in REPAIRED_KINDS)

    rc, summary, err = aigc(capsys, *PREPARE, "--lake", lake, "--min-rows", "100000")
    assert rc == 1 and summary["ok"] is False
    assert error_line(err) == "error: GateFailed: quality gate 'curated' failed 1 check(s):"
    detail = f"partition: expect_column_values_to_be_between(column='rows', min_value=100000.0) — 1 of 1 rows " \
             f"unexpected, e.g. [{curated}]"
    assert detail in err and detail in summary["error"]
    # In plain words first: what is wrong, the value, the limit, and where to change it.
    assert (f"the curated partition has {curated} rows, fewer than the minimum 100000: too few clean records "
            "reached it (300 in the drop; see the quarantine by reason)") in err
    assert "the trigger form's 'min_rows' field, --min-rows on `aigc prepare`, or curated_gate.min_rows" in err

    rc, status, _ = aigc(capsys, "status", "--lake", lake, "--date", DATE)
    assert rc == 0 and status["ok"] is True and status["curated"] is None
    assert "nothing is published" in status["note"]
    failed = status["gates"]["curated"]  # status names the failed gate and why
    assert failed["passed"] is False and "fewer than the minimum 100000" in failed["failures"][0]


def test_an_empty_drop_is_refused_with_what_to_do(capsys, tmp_path):
    rc, summary, err = aigc(capsys, "make-raw", "--lake", str(tmp_path / "lake"), "--date", DATE, "--n", "0")
    assert rc == 1 and error_line(err) == (
        "error: ValueError: RawDropConfig.n must be in [1, 50000000], got 0 (set with the trigger form's "
        "'n_records' field, --n on `aigc make-raw`, or raw.n in a preset)")
    # A producer's drop that is complete but empty: prepare says so before any gate runs.
    drop = tmp_path / "lake" / "raw" / "shapes" / f"dt={DATE}"
    drop.mkdir(parents=True)
    (drop / "records-00000.jsonl").write_bytes(b"")
    (drop / "_SUCCESS").write_text("{}")
    rc, summary, err = aigc(capsys, "prepare", "--lake", str(tmp_path / "lake"), "--date", DATE)
    assert rc == 1 and error_line(err).startswith(
        f"error: EmptyDrop: the raw drop at file://{drop} is complete but holds no records")
    assert f"`aigc make-raw --date {DATE} --n N`" in err


def test_a_lake_path_that_is_a_file_says_how_to_fix_it(capsys, tmp_path):
    (tmp_path / "taken").write_text("not a folder")
    rc, summary, err = aigc(capsys, "status", "--lake", str(tmp_path / "taken" / "lake"), "--date", DATE)
    assert rc == 1 and error_line(err) == (
        f"error: NotADirectoryError: the lake path {tmp_path}/taken/lake cannot be a folder: {tmp_path}/taken is a "
        "file. Point AIGC_LAKE_URI (or --lake) at a folder (it is created if missing) or at s3://bucket/prefix")


@pytest.mark.parametrize("command", ["make-raw", "prepare", "train"])
def test_an_unsupported_resolution_is_a_clear_config_error(capsys, tmp_path, command):
    rc, summary, err = aigc(capsys, command, "--lake", str(tmp_path), "--date", DATE, "--resolution", "33")
    message = ("ImageSettings.resolution must be one of (32, 64, 128, 256), got 33 (set with --resolution on the "
               "`aigc` commands that take it with --workload image, the trigger form's 'settings' field "
               '({"resolution": …}), or workload.settings.resolution in a preset)')
    assert rc == 1 and error_line(err) == f"error: ValueError: {message}"
    assert summary == {"command": command, "ok": False, "error": f"ValueError: {message}"}
    assert not (tmp_path / "raw").exists()  # refused before anything was written


def test_a_non_numeric_flag_is_an_argparse_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", "--lake", str(tmp_path), "--date", DATE, "--resolution", "big"])
    assert exit_.value.code == 2
    assert "argument --resolution: invalid int value: 'big'" in capsys.readouterr().err
