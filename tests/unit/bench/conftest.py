"""The bench modules (a package run from the repository root, ``python -m bench.<name>``) by name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"


def bench_command(name: str, *args: str) -> list[str]:
    """How a bench module runs (from ``ROOT``): ``python -m bench.<name> ARGS``."""
    return [sys.executable, "-m", f"bench.{name}", *args]


@pytest.fixture
def bench_module():
    """``bench_module("summary")``: ``bench.summary``."""
    return lambda name: importlib.import_module(f"bench.{name}")
