"""The raw-drop contract between producers and stage 1 (documented in docs/stages/prepare.md).

    <raw root>/dt=YYYY-MM-DD/records-*.jsonl   one JSON object per line, its fields the workload's
                                               (``RecordRules.record_fields``: id, source, created_at and e.g.
                                               caption and image for the image workload)
    <raw root>/dt=YYYY-MM-DD/…                  objects the records name (``RecordRules.attachment_field``)
    <raw root>/dt=YYYY-MM-DD/_SUCCESS           written last: the drop is complete

A drop is read only once its ``_SUCCESS`` marker exists, so a half-uploaded drop is never
prepared. A producer's root is read-only to the pipeline: a synthetic (demo) drop has a root of its own,
``<lake>/raw/_synthetic/<source>`` (no producer's source name starts with ``_``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aigc.lake import Lake, ObjectNotFound, open_lake
from aigc.lake.keys import join, parse_date, validate_name
from aigc.lines import DEFAULT_MAX_LINE_BYTES, LongLine, line_size

SUCCESS = "_SUCCESS"
SYNTHETIC = "_synthetic"


def raw_root(lake: Lake, drop: str, source: str, raw_uri: str | None = None,
             open_uri: Callable[[str], Lake] | None = None) -> Lake:
    """The root stage 1 reads ``source``'s drops from: a producer's (``raw_uri``, opened with ``open_uri``, else
    ``<lake>/raw/<source>``), or for ``drop="synthetic"`` the synthetic drops' own root. ValueError for a
    synthetic drop aimed at a raw URI: a demo drop is never written where a producer's drops are."""
    source = validate_name("source", source)
    if drop == "synthetic":
        if raw_uri:
            raise ValueError(f"a synthetic drop is written under {lake.url(join('raw', SYNTHETIC, source))}, never "
                             f"at a producer's raw URI ({raw_uri}): leave the raw URI empty, or set drop to "
                             "'producer' to prepare what was dropped there")
        return lake.sub(join("raw", SYNTHETIC, source))
    if raw_uri:
        return (open_uri or open_lake)(raw_uri)
    return lake.sub(join("raw", source))


class DropNotFound(FileNotFoundError):
    """No complete drop for a date: the marker is missing."""


class EmptyDrop(ValueError):
    """A complete drop without a single record: nothing to prepare."""


def drop_prefix(date: str | dt.date) -> str:
    return join(f"dt={parse_date(date).isoformat()}")


def record_files(raw: Lake, date: str | dt.date) -> list[str]:
    """The JSONL files of a complete drop, in order; DropNotFound if it is not complete."""
    prefix = drop_prefix(date)
    if not raw.exists(join(prefix, SUCCESS)):
        present = raw.list(prefix)
        what = f"{len(present)} objects but no {SUCCESS} marker" if present else "nothing"
        raise DropNotFound(
            f"no complete raw drop at {raw.url(prefix)}: found {what}. Producers write {SUCCESS} last; for a "
            f"synthetic demo drop instead, `aigc make-raw --date {parse_date(date)}` writes one under "
            f"raw/{SYNTHETIC}/ and `aigc prepare --drop synthetic` prepares it"
        )
    return [k for k in raw.list(prefix, recursive=False) if k.endswith(".jsonl")]


MAX_MARKER_BYTES = 64 * 1024
"""A ``_SUCCESS`` marker larger than this is read as a bare marker: its count only feeds a progress bar."""


def announced_records(raw: Lake, date: str | dt.date) -> int | None:
    """The record count a complete drop's marker announces (``{"records": N}``), or None for a bare, oversized or
    malformed marker: the producer's file is read within bounds and never fails the run."""
    from aigc.jsonlines import JsonLimits, Refused, read_json_object

    key = join(drop_prefix(date), SUCCESS)
    try:
        if raw.size(key) > MAX_MARKER_BYTES:
            return None
        records = read_json_object(raw.get_bytes(key), JsonLimits(max_line_bytes=MAX_MARKER_BYTES)).get("records")
    except (ObjectNotFound, Refused):
        return None
    return records if isinstance(records, int) and not isinstance(records, bool) and records >= 0 else None


@dataclass(frozen=True)
class RawLine:
    """One line of a drop, as bytes, with where it came from (for quarantine and messages)."""

    file: str
    line_no: int
    data: bytes


def iter_lines(raw: Lake, files: list[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[RawLine]:
    """Every non-blank line of ``files`` (from ``record_files``), streamed; one over ``max_line_bytes`` as a
    ``LongLine`` (its head and length), which parsing refuses."""
    for key in files:
        try:
            for n, line in enumerate(raw.iter_lines(key, max_line_bytes=max_line_bytes), start=1):
                if _worth_reading(line):
                    yield RawLine(key, n, line)
        except ObjectNotFound:
            raise DropNotFound(f"{raw.url(key)} vanished while the drop was being read") from None


@dataclass(frozen=True)
class Segment:
    """The lines of ``file`` that start at a byte offset in [``start``, ``end``): a mapped task's share of a drop."""

    file: str
    start: int
    end: int


def split_drop(raw: Lake, files: list[str], parts: int, sizes: list[int] | None = None) -> list[list[Segment]]:
    """The drop's files, in order, cut into ``parts`` runs of about equal bytes (a cut may fall inside a file: the
    line it falls in goes to the part where it starts). Concatenated, the parts are the drop in drop order; a part
    is empty when the drop has fewer bytes than parts. ``sizes``: the files' sizes as a snapshot listed them (else
    each file's HEAD)."""
    sizes = sizes if sizes is not None else [raw.size(f) for f in files]
    total = sum(sizes)
    cuts = [total * i // parts for i in range(parts + 1)]
    split: list[list[Segment]] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        segments, base = [], 0
        for key, size in zip(files, sizes, strict=True):
            start, end = max(lo, base), min(hi, base + size)
            if start < end:
                segments.append(Segment(key, start - base, end - base))
            base += size
        split.append(segments)
    return split


def iter_segments(raw: Lake, segments: list[Segment],
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[RawLine]:
    """Every non-blank line that starts in ``segments``, numbered as in its whole file. The file is read from its
    start (line numbers need the lines before); JSONL lines are small beside the objects they name."""
    for segment in segments:
        offset = 0
        try:
            for n, line in enumerate(raw.iter_lines(segment.file, max_line_bytes=max_line_bytes), start=1):
                if offset >= segment.end:
                    break
                if offset >= segment.start and _worth_reading(line):
                    yield RawLine(segment.file, n, line)
                offset += line_size(line) + 1
        except ObjectNotFound:
            raise DropNotFound(f"{raw.url(segment.file)} vanished while the drop was being read") from None


def _worth_reading(line: bytes) -> bool:
    """Not a blank line (a line cut to its head is never blank: its head may be spaces before a record)."""
    return isinstance(line, LongLine) or bool(line.strip())
