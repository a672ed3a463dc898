"""What a decoding process does with a batch of raw lines: parse, fetch, check, decode.

The parent only reads lines, deduplicates and writes; everything per-record runs here, in
``workers`` processes, so the parent stays off the critical path on a 2-core machine.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aigc.config import PrepareConfig
from aigc.lake import Lake, LocalLake, ObjectNotFound
from aigc.prepare.checks import Rejected, examine, parse_line
from aigc.prepare.drop import RawLine

_state: dict = {}


def init_worker(drop: Lake, cfg: PrepareConfig) -> None:
    """Run once per process: the drop's lake and the config, instead of once per batch."""
    _state.update(drop=drop, cfg=cfg)
    _state.setdefault("fetcher", ThreadPoolExecutor(max_workers=8))  # one per process, reused


def _fetch(key: str) -> bytes | None:
    try:
        return _state["drop"].get_bytes(key)
    except ObjectNotFound:
        return None


def examine_lines(lines: list[RawLine]) -> list[tuple[dict | None, bytes | None, dict | Rejected]]:
    """For each line: (the parsed record, the image bytes worth quarantining, the verdict).

    A curated verdict carries its (normalised) image, so the raw bytes are not sent back twice.
    """
    cfg = _state["cfg"]
    parsed = [parse_line(line.data) for line in lines]
    records = [p for p in parsed if not isinstance(p, Rejected)]
    # Remote objects are fetched concurrently (latency dominates); local reads are faster inline.
    fetch_all = map if isinstance(_state["drop"], LocalLake) else _state["fetcher"].map
    images = iter(list(fetch_all(lambda r: _fetch(r["image"]), records)))  # in the order of `records`
    out = []
    for p in parsed:
        if isinstance(p, Rejected):
            out.append((None, None, p))
            continue
        image = next(images)
        verdict = examine(p, image, cfg)
        rejected = isinstance(verdict, Rejected) and image is not None and len(image) <= cfg.max_image_bytes
        out.append((p, image if rejected else None, verdict))
    return out
