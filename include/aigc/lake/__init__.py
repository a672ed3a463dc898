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


def key_in(lake: Lake, uri: str) -> str:
    """The lake key of ``uri``, a URI under the lake (or a folder lake's path) or a key; ValueError for one
    elsewhere (nothing outside the lake is read)."""
    roots = [lake.uri.rstrip("/") + "/"]
    if isinstance(lake, LocalLake):  # a folder lake: its path names it as well as its file:// URL
        roots.append(str(lake.root).rstrip("/") + "/")
    for root in roots:
        if uri.startswith(root):
            return uri[len(root):]
    if "://" in uri or uri.startswith("/"):
        raise ValueError(f"{uri} is not in the lake {lake.uri}")
    return uri.lstrip("/")
