"""A prompt file pinned by the run that answers it: read once, streamed, within bounds; every shard reads its own
slice of that one version, checked against the hash the plan took.

A dropped file can be dropped again while a run answers it. Re-reading it per shard would answer the first
shards from one version and the last from the other; so planning streams the file once (its SHA-256 taken on
the way, its size and line count bounded by ``GenerateConfig``), writes each line's prompt, normalised, into
the run's own ``prompts.pinned.jsonl``, and records each shard's byte range in it with that range's SHA-256.
A shard reads only its range (a ranged read) and refuses bytes that are not what the plan recorded. A file
changed after planning is a new claim and a new run; never a mix.

A line that is not a prompt (malformed, too long, too deep, a duplicate id) is answered too, as a refused row
with its reason (``prompt_id`` ``#line-<n>`` when it has none of its own), so one bad line costs one prompt,
never the run.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from aigc.config import GenerateConfig
from aigc.jsonlines import JsonLimits, Refused, read_json_object
from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join
from aigc.lines import LongLine, split_lines

PINNED = "prompts.pinned.jsonl"
_SEED_RANGE = (0, 2**63 - 1)


class BadPrompts(ValueError):
    """A prompt file that cannot be answered at all (missing, empty, over its bounds): the message says why."""


@dataclass(frozen=True)
class PromptOption:
    """A per-prompt setting a prompt-file line may carry (``Workload.prompt_options``): an integer or a number in
    [lo, hi], a string of ``lo`` to ``hi`` characters (a negative prompt), or a list of at most ``hi`` strings (stop
    strings)."""

    kind: str
    """"integer", "number", "string" or "strings"."""
    lo: float
    hi: float

    def check(self, value) -> str | None:
        """None when ``value`` is one; else why not, with the bounds."""
        if self.kind == "string":
            ok = isinstance(value, str) and self.lo <= len(value) <= self.hi
            return None if ok else f"must be a string of {self.lo:g} to {self.hi:g} characters, got {value!r}"
        if self.kind == "strings":
            ok = isinstance(value, list) and len(value) <= self.hi and all(
                isinstance(v, str) and 0 < len(v) <= 200 for v in value)
            return None if ok else f"must be a list of at most {self.hi:g} non-empty strings, got {value!r}"
        numeric = isinstance(value, int | float) and not isinstance(value, bool) and (
            self.kind == "number" or isinstance(value, int))
        if not numeric or not self.lo <= value <= self.hi:
            return f"must be {'an integer' if self.kind == 'integer' else 'a number'} in [{self.lo:g}, {self.hi:g}], " \
                   f"got {value!r}"
        return None


class PromptsChanged(RuntimeError):
    """A shard's slice of the pinned prompts is not what the plan recorded."""


def pin(lake: Lake, key: str, run: str, cfg: GenerateConfig, shards: int,
        options: Mapping[str, PromptOption] | None = None) -> dict:
    """Stream the prompt file at ``key`` into ``run``'s pinned copy, cut into ``shards`` contiguous slices of nearly
    equal counts (``shard_ranges``); what the plan records of it. ``options``: the per-prompt settings a line may
    carry (``Workload.prompt_options``), each checked here: a line with a bad one is refused, naming it."""
    try:
        declared = lake.size(key)
    except ObjectNotFound:
        raise BadPrompts(f"no prompt file at {lake.url(key)}; drop one (one JSON object per line: prompt_id, prompt, "
                         "seed) or generate the demo set") from None
    if declared > cfg.max_prompt_file_bytes:
        raise BadPrompts(_too_big(lake, key, declared, cfg))
    source, read = hashlib.sha256(), [0]

    def chunks() -> Iterator[bytes]:
        with lake.open_input(key) as f:
            while chunk := f.read(1 << 20):
                read[0] += len(chunk)
                if read[0] > cfg.max_prompt_file_bytes:  # a size from a HEAD is a claim, not a bound
                    raise BadPrompts(_too_big(lake, key, read[0], cfg))
                source.update(chunk)
                yield chunk

    limits, seen, refused = cfg.json_limits, set(), 0
    offsets = array("q", [0])
    pinned = join(run, PINNED)
    with lake.open_output(pinned) as out:
        for line_no, line in enumerate(split_lines(chunks(), limits.max_line_bytes), start=1):
            if not line.strip() and not isinstance(line, LongLine):
                continue
            if len(offsets) > cfg.max_prompts:
                raise BadPrompts(f"{lake.url(key)} holds more than max_prompts={cfg.max_prompts:,} prompts; split it "
                                 f"or raise --max-prompts on `aigc generate`")
            entry = _entry(line, line_no, seen, cfg, limits, options or {})
            refused += "refused" in entry
            data = (json.dumps(entry) + "\n").encode()
            out.write(data)
            offsets.append(offsets[-1] + len(data))
    n = len(offsets) - 1
    if n == 0:
        raise BadPrompts(f"{lake.url(key)} holds no prompts")
    slices = []
    with lake.open_input(pinned) as f:  # one pass over our own copy: each slice's hash, one slice in memory
        for k, (lo, hi) in enumerate(shard_ranges(n, shards)):
            data = f.read(offsets[hi] - offsets[lo])
            slices.append({"shard": k, "lo": lo, "hi": hi, "start": offsets[lo], "bytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()})
    return {"prompts": n, "refused_lines": refused, "pinned": pinned,
            "source": {"key": key, "uri": lake.url(key), "sha256": source.hexdigest(), "bytes": read[0]},
            "slices": slices}


def read_slice(lake: Lake, pinned: str, piece: dict) -> list[dict]:
    """A shard's prompts: its byte range of the pinned copy, checked against the plan's hash."""
    data = lake.read_range(pinned, piece["start"], piece["bytes"])
    if hashlib.sha256(data).hexdigest() != piece["sha256"]:
        raise PromptsChanged(f"shard {piece['shard']}'s prompts ({piece['bytes']} bytes at {piece['start']} of "
                             f"{lake.url(pinned)}) are not the bytes the plan pinned (SHA-256 {piece['sha256']}): "
                             "the run's own copy was changed or cut; plan the run again")
    return [json.loads(line) for line in data.splitlines()]


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal [lo, hi) ranges; never an empty shard."""
    shards = max(1, min(shards, n))
    bounds = [round(k * n / shards) for k in range(shards + 1)]
    return list(zip(bounds, bounds[1:], strict=False))


def _too_big(lake: Lake, key: str, size: int, cfg: GenerateConfig) -> str:
    return (f"prompt file {lake.url(key)} is {size:,} bytes or more, over max_prompt_file_bytes="
            f"{cfg.max_prompt_file_bytes:,}; split it, or raise --max-prompt-file-bytes on `aigc generate`")


def _entry(line: bytes, n: int, seen: set, cfg: GenerateConfig, limits: JsonLimits,
           options: Mapping[str, PromptOption]) -> dict:
    """One line → ``{"prompt_id", "prompt", "seed", "line"}`` (and ``options``, the line's per-prompt settings), or
    the same with ``refused``: why it is not one."""
    try:
        row = read_json_object(line, limits)
    except Refused as e:
        return _refused(n, f"{e.reason}: {e.detail}")
    pid, text, seed = row.get("prompt_id"), row.get("prompt"), row.get("seed", cfg.seed + n)
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str) or not pid or pid.startswith("#") or not isinstance(text, str):
        return _refused(n, "missing_field: a line needs a string prompt_id (not starting with '#') and a string "
                           "prompt", text if isinstance(text, str) else "")
    if pid in seen:
        return _refused(n, f"duplicate_prompt_id: prompt_id {pid!r} appears on an earlier line", text)
    if not isinstance(seed, int) or isinstance(seed, bool) or not _SEED_RANGE[0] <= seed <= _SEED_RANGE[1]:
        return _refused(n, f"seed_invalid: seed must be an integer in [0, 2**63), got {seed!r}"[:300], text)
    chosen = {}
    for name, option in options.items():
        if name in row:
            why = option.check(row[name])
            if why:
                return _refused(n, f"option_invalid: {name} {why}"[:300], text)
            chosen[name] = row[name]
    seen.add(pid)
    return {"prompt_id": pid, "prompt": text, "seed": seed, "line": n, **({"options": chosen} if chosen else {})}


def _refused(n: int, reason: str, prompt: str = "") -> dict:
    return {"prompt_id": f"#line-{n}", "prompt": prompt[:1000], "seed": 0, "line": n, "refused": reason}
