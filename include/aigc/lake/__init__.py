"""The lake: one URI root (a local folder or ``s3://bucket/prefix``), one interface."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from aigc.lake.base import Lake, ObjectCorrupt, ObjectNotFound, PreconditionFailed
from aigc.lake.keys import LakeKeyError
from aigc.lake.local import LocalLake
from aigc.lake.s3 import S3Lake, S3Options

DEFAULT_LAKE = ".lake"
"""Where the lake lives when ``AIGC_LAKE_URI`` is unset: a folder in the working directory."""

__all__ = [
    "Lake", "LakeKeyError", "LocalLake", "ObjectCorrupt", "ObjectNotFound", "PreconditionFailed", "S3Lake", "S3Options",
    "default_lake_uri", "open_lake",
]


def default_lake_uri() -> str:
    return os.environ.get("AIGC_LAKE_URI") or str(Path(DEFAULT_LAKE).resolve())


def open_lake(uri: str | None = None, s3: S3Options | None = None) -> Lake:
    """Open the lake at ``uri`` (default ``$AIGC_LAKE_URI``, else ``./.lake``).

    ``s3`` overrides the S3 endpoint and credentials, which otherwise come from the standard
    AWS variables; Airflow tasks pass the ``aws_default`` connection's values here.
    """
    uri = uri or default_lake_uri()
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return S3Lake(uri, s3)
    if parsed.scheme == "file":
        return LocalLake(unquote(parsed.path))
    if parsed.scheme in ("", ) or len(parsed.scheme) == 1:  # a plain path (or a Windows drive)
        return LocalLake(uri)
    raise ValueError(f"unsupported lake URI {uri!r}: use a folder path, file://… or s3://bucket/prefix")
