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


WIRE_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3")
"""Loggers whose DEBUG lines show requests on the wire, credentials included."""


def setup_logging(level: str | int | None = None) -> None:
    level = level or os.environ.get("AIGC_LOG_LEVEL", "INFO")
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Great Expectations narrates its own set-up at INFO (hundreds of lines per gate): keep its warnings only.
    logging.getLogger("great_expectations").setLevel(max(logging.WARNING, logging.getLogger().level))
    # The S3 client's debug output carries credentials (botocore logs each request's headers, the session token
    # among them, and its signing steps): --log-level DEBUG is for aigc's own lines. AIGC_WIRE_DEBUG=1, and a
    # log kept to oneself, for the rare case that needs the wire.
    if os.environ.get("AIGC_WIRE_DEBUG") != "1":
        for name in WIRE_LOGGERS:
            logging.getLogger(name).setLevel(max(logging.INFO, logging.getLogger().level))


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
