"""What a decoding process does with a batch of raw lines: the workload's record rules (parse, fetch, check,
decode, sign).

The parent only reads lines, deduplicates and writes; everything per-record runs here, in ``workers``
processes, so the parent stays off the critical path on a 2-core machine. The curated candidates go
back as columns, so the parent writes them without a dict per row.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aigc.config import PrepareConfig
from aigc.lake import Lake, LakeKeyError, LocalLake, ObjectNotFound
from aigc.prepare.drop import RawLine
from aigc.prepare.records import Examined, Unreadable
from aigc.workload import RecordRules

_state: dict = {}


def init_worker(drop: Lake, cfg: PrepareConfig, rules: RecordRules) -> None:
    """Run once per process: the drop's lake, the config and the workload's rules (sent pickled to each process),
    instead of once per batch."""
    _state.update(drop=drop, cfg=cfg, rules=rules)
    _state.setdefault("fetcher", ThreadPoolExecutor(max_workers=8))  # one per process, reused


def _fetch(key: str) -> bytes | Unreadable | None:
    try:
        return _state["drop"].get_bytes(key)
    except ObjectNotFound:
        return None
    except LakeKeyError as e:  # a symbolic link, or a path out of the drop: refused by the lake, never read
        return Unreadable(str(e))


def fetch_all(keys: list[str]) -> list[bytes | Unreadable | None]:
    """Objects of the drop by key (None where missing, ``Unreadable`` where the lake refused the key), in order.
    Remote objects are fetched concurrently (latency dominates); local reads are faster inline."""
    if isinstance(_state["drop"], LocalLake):
        return [_fetch(k) for k in keys]
    return list(_state["fetcher"].map(_fetch, keys))


def examine_lines(lines: list[RawLine]) -> Examined:
    """Parse, fetch and check a batch of lines (see ``Examined``)."""
    return _state["rules"].examine_lines(lines, fetch_all, _state["cfg"])
