"""The image workload's stage 1: caption and image checks (``aigc.workloads.image.checks``), decoded and signed in the
decoding processes, and near-duplicates confirmed on thumbnails in the parent (``aigc.workloads.image.dedup``)."""

from __future__ import annotations

import pyarrow as pa

from aigc.prepare.records import Examined, Rejected
from aigc.workload import RecordRules
from aigc.workloads.image.checks import REASONS, examine_all, parse_line
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.image.dedup import Deduplicator

CURATED_SCHEMA = pa.schema([
    ("id", pa.string()), ("caption", pa.string()), ("image", pa.binary()),
    ("width", pa.int32()), ("height", pa.int32()), ("mode", pa.string()),
    ("orig_width", pa.int32()), ("orig_height", pa.int32()), ("orig_mode", pa.string()),
    ("caption_chars", pa.int32()), ("image_sha256", pa.string()), ("content_hash", pa.string()),
    ("source", pa.string()), ("created_at", pa.string()),
])


class ImageRecordRules(RecordRules):
    record_fields = ("id", "caption", "image", "source", "created_at")
    attachment_field = "image"
    payload_columns = ("image",)
    stats_columns = ("caption_chars",)
    dedup_keys = ("id", "content_hash", "_thumb", "_sig", "_bands")

    reasons = REASONS
    curated_schema = CURATED_SCHEMA

    def __init__(self, settings: ImageSettings):
        self.settings = settings  # sent pickled to the decoding processes with the rules

    def examine_lines(self, lines, fetch_all, cfg):
        parsed = [parse_line(line.data, cfg.json_limits) for line in lines]
        records = [p for p in parsed if not isinstance(p, Rejected)]
        images = fetch_all([r["image"] for r in records])  # in the order of `records`
        verdicts = examine_all(list(zip(records, images, strict=True)), cfg, self.settings)
        checked = iter(zip(images, verdicts, strict=True))
        outcomes, rows = [], []
        for p in parsed:
            if isinstance(p, Rejected):
                outcomes.append((p.record, None, p))
                continue
            image, verdict = next(checked)
            if isinstance(verdict, Rejected):
                worth_keeping = isinstance(image, bytes) and len(image) <= self.settings.max_image_bytes
                outcomes.append((p, image if worth_keeping else None, verdict))
            else:  # a curated row carries its (normalised) image, so the raw bytes are not sent back twice
                rows.append(verdict)
                outcomes.append((p, None, {key: verdict[key] for key in self.dedup_keys}))
        return Examined(outcomes, {name: [row[name] for row in rows] for name in self.curated_schema.names})

    def deduplicator(self, cfg):
        return Deduplicator(cfg.near_dup_threshold, cfg.near_dup_num_perm, self.settings.near_dup_image_distance,
                            cfg.near_dup_per_bucket)

    def expectations(self, cfg):
        import great_expectations.expectations as gxe

        res = self.settings.resolution
        return [
            *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in ("caption", "image_sha256")],
            gxe.ExpectColumnValueLengthsToBeBetween(column="caption", min_value=self.settings.min_caption_chars,
                                                    max_value=self.settings.max_caption_chars),
            gxe.ExpectColumnValuesToBeBetween(column="width", min_value=res, max_value=res),
            gxe.ExpectColumnValuesToBeBetween(column="height", min_value=res, max_value=res),
            gxe.ExpectColumnValuesToBeInSet(column="mode", value_set=["RGB"]),
            gxe.ExpectColumnValueLengthsToEqual(column="image_sha256", value=64),
        ]
