"""Stage 1, data preparation: raw drop → curated Parquet shards + quarantine."""

from aigc.prepare.drop import DropNotFound
from aigc.prepare.run import ReconciliationError, prepare, publish_prepared

__all__ = ["DropNotFound", "ReconciliationError", "prepare", "publish_prepared"]
