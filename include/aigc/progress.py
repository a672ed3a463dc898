"""Human progress on stderr, one JSON summary line on stdout: every CLI command ends with it."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")
log = logging.getLogger("aigc")


def setup_logging(level: str | int | None = None) -> None:
    level = level or os.environ.get("AIGC_LOG_LEVEL", "INFO")
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Great Expectations narrates its own set-up at INFO (hundreds of lines per gate): keep its warnings only.
    logging.getLogger("great_expectations").setLevel(max(logging.WARNING, logging.getLogger().level))


def progress(items: Iterable[T], *, desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """A progress bar on an interactive terminal; periodic log lines elsewhere (Airflow task logs)."""
    disable = not sys.stderr.isatty() or os.environ.get("AIGC_PROGRESS") == "0"
    bar = tqdm(items, desc=desc, total=total, unit=unit, disable=disable, mininterval=0.5, file=sys.stderr)
    if not disable:
        yield from bar
        return
    total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)
    step = max(1, (total or 0) // 10) if total else 10_000
    n = 0
    for n, item in enumerate(items, start=1):
        yield item
        if n % step == 0:
            log.info("%s: %d%s %s", desc, n, f"/{total}" if total else "", unit)


def emit_summary(summary: dict[str, Any]) -> None:
    """The last line a command prints: one JSON object that scripts and tests read."""
    sys.stdout.write(json.dumps(summary, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
