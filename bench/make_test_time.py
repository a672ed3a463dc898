"""How long ``make test`` takes on a fresh clone: the figure the README quotes, measured, not typed.

    python -m bench.make_test_time [--repo .] [--keep]

Clones the repository's HEAD into a temporary folder, times ``make install system-deps`` (the venv, Airflow's
home, the system packages) and then ``make test`` (which finds them done), parses pytest's closing line, and writes
``bench/results/make_test.json`` with this host, the date and the commit. Exits with ``make test``'s status (a
failing suite's time is still written, marked ``passed_suite: false``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.provenance import ROOT, other_hosts, write_results

RESULTS = ROOT / "bench" / "results" / "make_test.json"
LOG = ROOT / ".bench" / "make_test.log"
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def counts(output: str) -> dict[str, int]:
    """pytest's closing line (``733 passed, 4 skipped in 947.21s``) as counts."""
    line = next((x for x in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", x)), "")
    found = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in SUMMARY.findall(line)}
    return {k: found.get(k, 0) for k in ("passed", "failed", "skipped", "error")}


def timed(command: list[str], cwd: Path) -> tuple[float, int, str]:
    t0 = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-4000:])
    sys.stderr.write(proc.stderr[-4000:])
    return time.monotonic() - t0, proc.returncode, proc.stdout + proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=str(ROOT))
    ap.add_argument("--keep", action="store_true", help="keep the clone (printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aigc-make-test-"))
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    setup_s, rc, _ = timed(["make", "install", "system-deps"], clone)
    if rc:
        return rc
    suite_s, rc, output = timed(["make", "test"], clone)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text(output)  # whole: a failure's traceback is above the tail printed here
    result = {"bench": "make_test", "wall_s": round(setup_s + suite_s, 1), "setup_s": round(setup_s, 1),
              "suite_s": round(suite_s, 1), **counts(output), "passed_suite": rc == 0}
    result["tests"] = result["passed"] + result["failed"] + result["skipped"] + result["error"]
    result["other_hosts"] = other_hosts(RESULTS)
    write_results(RESULTS, result, measured_commit=commit)  # the clone's, not this checkout's
    print(f"make test: {result['wall_s'] / 60:.1f} min on {commit} ({result['tests']} tests, exit {rc}); "
          f"{'kept ' + str(clone) if args.keep else 'clone removed'}; its whole output in {LOG}")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return rc


if __name__ == "__main__":
    sys.exit(main())
