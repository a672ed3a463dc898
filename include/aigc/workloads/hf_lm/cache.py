"""Where the ``hf-causal-lm`` workload keeps base models on this machine: the demo bases it builds and the copies
of bases read from a lake (``AIGC_HF_CACHE``, default ``~/.cache/aigc/hf-bases``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_SETTING = "AIGC_HF_CACHE"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_SETTING) or Path.home() / ".cache" / "aigc" / "hf-bases")
