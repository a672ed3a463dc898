"""The safety filter every workload shares: a whole-word blocklist (``aigc/data/blocklist.txt``, or a file of the
operator's with ``--blocklist``), applied to raw records in stage 1, to prompts in stage 4 (a blocked prompt is
refused, never generated) and to outputs in stage 5."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path


def blocked_terms(path: str | None = None) -> list[str]:
    """The blocklist's terms, lower-cased (comments and blank lines left out)."""
    text = resources.files("aigc.data").joinpath("blocklist.txt").read_text("utf-8") if path is None else \
        Path(path).read_text("utf-8")
    return [t.strip().lower() for t in text.splitlines() if t.strip() and not t.lstrip().startswith("#")]


@lru_cache(maxsize=4)  # per file: every record and prompt asks
def _blocklist_pattern(path: str | None) -> re.Pattern | None:
    terms = blocked_terms(path)
    if not terms:
        return None
    # Whole words only: "scunthorpe" must not trip on a term inside it.
    return re.compile(r"\b(" + "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)) + r")\b", re.I)


def blocked_term(text: str, blocklist: str | None) -> str | None:
    """The first blocked term in ``text`` (lower-cased), or None."""
    pattern = _blocklist_pattern(blocklist)
    match = pattern.search(text) if pattern else None
    return match.group(1).lower() if match else None


