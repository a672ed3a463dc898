"""Stage 1 settings: the synthetic raw drop, preparation, and gate 1."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range
from aigc.jsonlines import check_limits

DROPS = ("producer", "synthetic")


@dataclass(frozen=True)
class RawDropConfig:
    """Which raw drop stage 1 prepares, and the synthetic one (``aigc make-raw``): a realistic, dirty drop."""

    drop: str = "producer"
    """``producer``: wait for a producer's drop under ``raw/<source>/dt=<date>/`` (or the raw URI) and only read it.
    ``synthetic``: write a demo drop for the date under ``raw/_synthetic/<source>/`` first, and prepare that (the
    demo and smoke presets). A synthetic drop never goes to a producer's root."""

    n: int = 20_000
    """Records in the drop, dirt included."""
    seed: int = 0
    """Everything in the drop is a function of the seed (and the date)."""
    dirt_rate: float = 0.12
    """Fraction of records that carry one kind of dirt (spread over every kind)."""
    source: str = "records"
    """Producer name: the drop lands under ``raw/<source>/dt=<date>/``. A preset names it after the workload unless
    the workload names it (``Workload.config_overrides``); ``records`` only in a configuration of no workload."""
    records_per_file: int = 5_000
    """JSONL records per file, as producers roll their files."""

    def __post_init__(self) -> None:
        if self.drop not in DROPS:
            raise ValueError(f"RawDropConfig.drop must be one of {DROPS}, got {self.drop!r} (set with the trigger "
                             "form's 'drop' field, --drop on `aigc prepare`, or raw.drop in a preset)")
        _check_range(self, "n", 1, 50_000_000)  # an empty drop is nothing to prepare
        _check_range(self, "dirt_rate", 0.0, 1.0)
        _check_range(self, "records_per_file", 1, 10_000_000)


@dataclass(frozen=True)
class PrepareConfig:
    """Stage 1: decode, verify, normalise, filter, deduplicate and shard a raw drop."""

    dataset: str = "records"
    """Curated dataset name: output under ``curated/<dataset>/dt=<date>/``; named like ``RawDropConfig.source``."""
    blocklist: str | None = None
    """A file of blocked terms, one per line; None uses the list shipped in the package."""
    near_dup_threshold: float = 0.7
    """Jaccard similarity (MinHash estimate) of two records' tokens (the workload's: caption words and the image's
    subject cells for images, word shingles for text) at or above which they are near-duplicates."""
    near_dup_num_perm: int = 128
    """MinHash permutations: more is more exact and slower."""
    dedup_lookback_days: int = 3
    """Earlier dates whose published rows a drop is deduplicated against (each published partition keeps its rows'
    dedup keys): 3, the training window's default, so no record is trained on twice; 0: within the drop only."""
    near_dup_per_bucket: int = 32
    """Kept records an LSH bucket offers as candidates (the earliest): bounds each record's dedup work, so a drop
    where thousands of records look alike stays linear. Raise it if near-duplicates of rows deep in a crowded
    bucket are missed."""
    shard_target_bytes: int = 64 * 1024 * 1024
    """A Parquet shard is closed once it holds about this many bytes."""
    row_group_rows: int = 2048
    row_group_bytes: int = 8 * 1024 * 1024
    """A row group is written once it holds this many bytes, even before row_group_rows."""
    workers: int = 0
    """Decoding processes; 0 means one per CPU core."""
    window: int = 4096
    """Records in flight at once: bounds memory whatever the drop size."""
    max_line_bytes: int = 2 * 1024 * 1024
    """A JSONL line longer than this is quarantined (``record_too_large``) with its first KiB and its length; the
    reader skips the rest in bounded memory."""
    max_json_depth: int = 64
    """…a record nested deeper (``malformed_json``)…"""
    max_json_int_digits: int = 100
    """…an integer with more digits (``malformed_json``)…"""
    max_json_values: int = 100_000
    """…and a record of more values, object members, array items and scalars together (``record_too_large``)."""
    parts: int = 1
    """Parts a drop is cut into (about equal bytes), each examined by its own task: the DAG maps ``prepare_part``
    over them (one per Celery worker on a cluster), ``aigc prepare --parts N`` runs them one after another. Every
    value gives the same curated rows and quarantine (the merge deduplicates in drop order)."""

    def __post_init__(self) -> None:
        _check_range(self, "near_dup_threshold", 0.05, 1.0)
        _check_range(self, "near_dup_num_perm", 16, 1024)
        _check_range(self, "near_dup_per_bucket", 1, 1_000_000)
        _check_range(self, "dedup_lookback_days", 0, 366)
        _check_range(self, "parts", 1, 4096)
        check_limits(self)
        _check_range(self, "shard_target_bytes", 64 * 1024, 4 << 30)
        _check_range(self, "row_group_rows", 16, 1_000_000)
        _check_range(self, "row_group_bytes", 64 * 1024, 1 << 30)
        _check_range(self, "workers", 0, 256)
        _check_range(self, "window", 16, 1_000_000)

    @property
    def json_limits(self):
        """The bounds on one raw line (``aigc.jsonlines``)."""
        from aigc.jsonlines import JsonLimits

        return JsonLimits.of(self, "prepare")


@dataclass(frozen=True)
class CuratedGateThresholds:
    """Gate 1 (prepare → train): what a curated partition must satisfy to be published."""

    min_rows: int = 1000
    max_quarantine_ratio: float = 0.5
    """Quarantined / input records, over all reasons."""
    max_reason_ratio: float = 0.2
    """Quarantined / input records for any single reason: one broken producer shows up here."""

    def __post_init__(self) -> None:
        _check_range(self, "min_rows", 0, 1 << 40)
        _check_range(self, "max_quarantine_ratio", 0.0, 1.0)
        _check_range(self, "max_reason_ratio", 0.0, 1.0)
