"""The bench scripts are files, not a package: a fixture loads one by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:  # the scripts run as `python bench/x.py`, with their folder first on the path
    sys.path.insert(0, str(BENCH))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench_module():
    """``bench_module("summary")``: bench/summary.py as a module."""
    return _load
