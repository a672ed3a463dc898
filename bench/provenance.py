"""Where, when and from which commit a bench result was measured, stamped into every results file.

Figures in the README and the docs are generated from ``bench/results/*.json`` (``bench/summary.py``); each names
the host, date and commit its file records, so a reader can tell a stale figure from a fresh one. Files written
before the stamp existed say so instead of guessing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "provenance"


def cpu_model() -> str:
    """The CPU's model name (Linux), and whether it has bf16 instructions: hosts that both say "2 cores" differ 2x
    in these benches, and bf16 training is fast only with them."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return f"{name or 'unknown CPU'} ({'with' if 'avx512_bf16' in info else 'no'} avx512_bf16)"


def gpu_model() -> str:
    """The GPUs NVML sees, with their memory ("" without a driver): the GPU section's rows depend on them."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: a CPU host
        return ""
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            gib = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            names.append(f"{name.decode() if isinstance(name, bytes) else name} ({gib:.0f} GiB)")
        return ", ".join(names)
    finally:
        pynvml.nvmlShutdown()


def machine() -> str:
    gpus = gpu_model()
    return (f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}){', GPU ' + gpus if gpus else ''}, "
            f"Python {platform.python_version()}, {platform.system()}")


def commit() -> str:
    """The checkout's commit, with ``+changes`` when the tree differs from it ("unknown" outside a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def stamp(measured_commit: str | None = None) -> dict:
    return {"host": machine(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": measured_commit or commit()}


def other_hosts(path: Path, fields: tuple[str, ...] | None = None) -> list[dict]:
    """The latest earlier measurement of each other host in the results file at ``path`` (its ``fields`` and
    provenance, or all of it), to keep beside this one: the same bench differs 2x between hosts that both say
    "2 cores", and a figure from one host alone would hide that."""
    if not path.exists():
        return []
    previous = json.loads(path.read_text())
    here = stamp()["host"]
    latest: dict[str, dict] = {}
    for run in [previous, *previous.get("other_hosts", [])]:
        host = run.get(KEY, {}).get("host")
        if host and host != here and host not in latest:
            latest[host] = {k: v for k, v in run.items()
                            if k != "other_hosts" and (fields is None or k in fields or k == KEY)}
    return list(latest.values())


def write_results(path: Path, result, indent: int = 2, measured_commit: str | None = None) -> None:
    """``result`` as JSON at ``path`` with this run's provenance (a list is kept whole under ``rows``);
    ``measured_commit``: the commit measured, where it is not this checkout's (a fresh clone's)."""
    body = result if isinstance(result, dict) else {"rows": result}
    Path(path).write_text(json.dumps({**body, KEY: stamp(measured_commit)}, indent=indent, ensure_ascii=False)
                          + "\n")


def provenance_of(result) -> str:
    """"host, date, commit" as the file records them, or that it does not."""
    p = result.get(KEY) if isinstance(result, dict) else None
    if not p:
        return "host, date and commit not recorded (written before results were stamped)"
    return f"{p['host']}; {p['date'][:10]}; commit {p['commit']}"
