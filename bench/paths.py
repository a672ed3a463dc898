"""Where the benches write their results: ``bench/results``, or ``$AIGC_BENCH_RESULTS`` when set.

``make bench-gpu`` (``run_all.py --gpu``) sets it to ``bench/results/gpu`` so that a GPU host's figures sit beside
the CPU ones instead of replacing them.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results"
GPU = DEFAULT / "gpu"


def results_dir() -> Path:
    return Path(os.environ.get("AIGC_BENCH_RESULTS") or DEFAULT).resolve()


def results_path(name: str) -> Path:
    return results_dir() / name
