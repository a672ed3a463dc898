"""Stage 1 across tasks: plan a drop into parts, examine each part in its own task, merge in drop order.

    plan ──┬─ part 0 ─┬─ merge      (the DAG maps ``prepare_part`` over the plan's parts; a Celery worker
           ├─ part 1 ─┤             takes each; ``aigc prepare --parts N`` runs them one after another)
           └─ …      ─┘

A part does everything per record (parse, fetch, decode, verify, normalise, sign: the work that grows with the
drop) and writes what it found to the lake: ``candidates`` (the curated columns, the dedup keys, where each line
came from) and ``rejected`` (quarantine rows), both in line order, then ``_part.json``. The merge reads the parts
back in drop order and feeds the same ``Curator`` as a one-host run, so its verdicts, shards and quarantine are
the same bytes as ``prepare``'s, whatever the number of parts. Dedup stays one pass in the merge: it reads
compact keys and runs numpy over them (see docs/stages/prepare.md, "Stage 1 at scale", for what a bigger cluster hands
to Spark or Ray instead).

Lake layout of the parts (deleted when the run is published):

    parts/<dataset>/dt=<date>/run=<run_id>/part-00003/candidates/part-00000.parquet …
                                                     /rejected/part-00000.parquet …
                                                     /_part.json
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pyarrow as pa

from aigc.config import PrepareConfig
from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join, parse_date, partition, run_prefix
from aigc.lake.publish import new_run_id
from aigc.prepare import delivery
from aigc.prepare.curate import Curator, Origin, curated_run, origin_of, quarantine_row, raw_uri
from aigc.prepare.drop import Segment, announced_records, drop_prefix, iter_segments, record_files, split_drop
from aigc.prepare.history import keys_schema
from aigc.prepare.records import Rejected
from aigc.prepare.run import examining
from aigc.prepare.shards import QUARANTINE_SCHEMA, RollingParquetWriter
from aigc.progress import progress
from aigc.workload import RecordRules

PART_DONE = "_part.json"
KEY = "_key_"  # the candidates' dedup-key columns: _key_<name>, apart from the curated columns
_ORIGIN = pa.schema([("_raw_file", pa.string()), ("_raw_line", pa.int64()), ("_raw", pa.binary()),
                     ("_record_id", pa.string()), ("_attachment_key", pa.string())])
_SEQ = pa.field("_seq", pa.int64())  # a line's place in its part: how the merge interleaves the two tables


class PartMissing(RuntimeError):
    """The merge found a part that has not finished (its task failed or has not run)."""


def parts_prefix(dataset: str, date: str | dt.date, run_id: str) -> str:
    return run_prefix(partition("parts", dataset, date), run_id)


def plan_prepare(raw: Lake, lake: Lake, date: str | dt.date, cfg: PrepareConfig, run_id: str | None = None) -> dict:
    """Cut the complete drop of ``date`` into ``cfg.parts`` parts of about equal bytes (DropNotFound if it is not
    complete), after a snapshot of the drop (written into the run's curated folder: the parts and the merge check
    the drop against it). Deterministic: a retried plan of an unchanged drop is the same plan."""
    date = parse_date(date)
    run_id = run_id or new_run_id()
    files = record_files(raw, date)
    snap = delivery.snapshot(raw, date, files)
    delivery.write(lake, curated_run(cfg.dataset, date, run_id), snap)
    listed = {name: size for name, size, _version in snap["listing"]}
    split = split_drop(raw, files, cfg.parts, [listed[f[len(drop_prefix(date)) + 1:]] for f in files])
    announced = announced_records(raw, date)
    return {"stage": "prepare_plan", "date": date.isoformat(), "run_id": run_id,
            "dataset": cfg.dataset, "raw": raw_uri(raw, date), "files": len(files), "announced": announced,
            "drop": delivery.summary(snap), "redelivered": delivery.redelivery(lake, cfg.dataset, date, snap),
            "parts": [{"index": i, "segments": [[s.file, s.start, s.end] for s in segments]}
                      for i, segments in enumerate(split)]}


def prepare_part(raw: Lake, lake: Lake, plan: dict, part: dict, cfg: PrepareConfig, rules: RecordRules) -> dict:
    """Examine one part of the plan and write what it found; its ``_part.json`` summary. A part that finished
    before (a retried task) is not redone; one that failed half-way starts again from nothing."""
    prefix = _part_prefix(plan, part)
    try:
        return lake.get_json(join(prefix, PART_DONE))
    except ObjectNotFound:
        lake.delete_prefix(prefix)
    delivery.check_unchanged(raw, lake, plan["date"], curated_run(plan["dataset"], plan["date"], plan["run_id"]),
                             plan["drop"]["digest"], "since the run was planned")
    started = time.perf_counter()
    sizes = {"target_bytes": cfg.shard_target_bytes, "row_group_rows": cfg.row_group_rows,
             "row_group_bytes": cfg.row_group_bytes}
    candidates = RollingParquetWriter(lake, join(prefix, "candidates"), candidate_schema(rules), **sizes)
    rejected = RollingParquetWriter(lake, join(prefix, "rejected"), QUARANTINE_SCHEMA.append(_SEQ), **sizes)
    segments = [Segment(*s) for s in part["segments"]]
    seq = 0
    with examining(raw.sub(drop_prefix(plan["date"])), cfg, rules) as examine:
        lines = progress(iter_segments(raw, segments, cfg.max_line_bytes),
                         desc=f"prepare {plan['date']} part {part['index']}", unit="rec")
        for lines_, examined in examine(lines):
            kept = []
            for line, (record, attachment, verdict) in zip(lines_, examined.outcomes, strict=True):
                origin = origin_of(line, record, rules)
                if isinstance(verdict, Rejected):
                    rejected.write({**quarantine_row(origin, verdict, attachment), "_seq": seq})
                else:
                    kept.append((seq, origin, verdict))
                seq += 1
            if kept:
                columns = dict(examined.columns)
                columns["_seq"] = [s for s, _, _ in kept]
                for name in _ORIGIN.names:
                    columns[name] = [getattr(o, _ORIGIN_FIELDS[name]) for _, o, _ in kept]
                for name in rules.dedup_keys:
                    columns[KEY + name] = [keys[name] for _, _, keys in kept]
                candidates.write_columns(columns)
    done = {"index": part["index"], "lines": seq, "candidates": sum(s["rows"] for s in candidates.close()),
            "rejected": sum(s["rows"] for s in rejected.close()),
            "candidate_shards": candidates.shards, "rejected_shards": rejected.shards,
            "seconds": round(time.perf_counter() - started, 3)}
    lake.put_json(join(prefix, PART_DONE), done)
    return done


def merge_parts(raw: Lake, lake: Lake, plan: dict, cfg: PrepareConfig, rules: RecordRules, workload: str) -> dict:
    """Deduplicate and write the plan's parts in drop order (``PartMissing`` if one has not finished); the same
    summary as ``prepare``'s, with the parts' figures under ``fanout``. ``DropChanged`` if the drop is no longer
    the one the plan saw."""
    started = time.perf_counter()
    date = parse_date(plan["date"])
    done = []
    for part in plan["parts"]:
        marker = join(_part_prefix(plan, part), PART_DONE)
        try:
            done.append(lake.get_json(marker))
        except ObjectNotFound:
            raise PartMissing(f"part {part['index']} of run {plan['run_id']} has not finished: no {lake.url(marker)}. "
                              "Run its prepare_part task (or `aigc prepare --parts N` again)") from None
    curator = Curator(lake, date, plan["run_id"], cfg, rules)
    total = sum(d["lines"] for d in done)
    for part in progress(done, desc=f"merge {date} ({total} records)", unit="part"):
        _merge_part(lake, curator, rules, part)
    fanout = {"parts": len(done), "part_seconds": [d["seconds"] for d in done],
              "merge_seconds": round(time.perf_counter() - started, 3)}
    seconds = max(fanout["part_seconds"], default=0) + fanout["merge_seconds"]  # the critical path
    delivery.check_unchanged(raw, lake, date, curator.curated_run, plan["drop"]["digest"],
                             "while it was being prepared")
    return curator.finish(total, plan["raw"], seconds, workload, fanout=fanout, drop=plan["drop"],
                          redelivered=plan.get("redelivered"))


def _part_prefix(plan: dict, part: dict) -> str:
    return join(parts_prefix(plan["dataset"], plan["date"], plan["run_id"]), f"part-{part['index']:05d}")


def candidate_schema(rules: RecordRules) -> pa.Schema:
    """A part's candidates: the curated columns, each dedup key as ``_key_<name>``, the line's origin, its place."""
    fields = list(rules.curated_schema)
    fields += [pa.field(KEY + f.name, f.type) for f in keys_schema(rules.dedup_keys)]
    return pa.schema([*fields, *_ORIGIN, _SEQ])


_ORIGIN_FIELDS = {"_raw_file": "file", "_raw_line": "line_no", "_raw": "raw", "_record_id": "record_id",
                  "_attachment_key": "attachment_key"}


def _batches(lake: Lake, shards: list[dict]) -> Iterator[dict[str, list]]:
    for shard in shards:
        for batch in lake.parquet_file(shard["key"], shard.get("bytes")).iter_batches(batch_size=1024):
            yield batch.to_pydict()


def _merge_part(lake: Lake, curator: Curator, rules: RecordRules, part: dict) -> None:
    """One part's lines into the curator in line order: each rejection where it fell, the candidates between two
    rejections at once."""
    curated = rules.curated_schema.names
    rejected = _rows(_batches(lake, part["rejected_shards"]))
    next_rejected = next(rejected, None)
    for batch in _batches(lake, part["candidate_shards"]):
        seqs, start = batch["_seq"], 0
        while start < len(seqs):
            # Rejections that come before the next candidate go first.
            while next_rejected is not None and next_rejected["_seq"] < seqs[start]:
                _reject(curator, next_rejected)
                next_rejected = next(rejected, None)
            stop = start + 1
            limit = next_rejected["_seq"] if next_rejected is not None else None
            while stop < len(seqs) and (limit is None or seqs[stop] < limit):
                stop += 1
            origins = [Origin(*(batch[name][i] for name in _ORIGIN.names)) for i in range(start, stop)]
            keys = [{name: batch[KEY + name][i] for name in rules.dedup_keys} for i in range(start, stop)]
            curator.candidates(keys, origins, {name: batch[name][start:stop] for name in curated})
            start = stop
    while next_rejected is not None:
        _reject(curator, next_rejected)
        next_rejected = next(rejected, None)


def _rows(batches: Iterator[dict[str, list]]) -> Iterator[dict]:
    for batch in batches:
        names = list(batch)
        for values in zip(*batch.values(), strict=True):
            yield dict(zip(names, values, strict=True))


def _reject(curator: Curator, row: dict) -> None:
    origin = Origin(row["raw_file"], row["raw_line"], row["raw"], row["id"], row["attachment_key"])
    curator.reject(origin, Rejected(row["reason"], row["detail"]), row["attachment"])
