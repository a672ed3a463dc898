"""Lake objects over HTTP: reports, plots, galleries and gate results, and nothing else.

A key from a URL is untrusted. It must be a valid lake key (no ``..``, not absolute, no
backslash or control characters: ``aigc.lake.keys.validate_key``), sit under one of the stage
roots people read, and have a known, harmless type. Weights, Parquet, raw drops, the registry
and hidden or temporary files are never served. On a local lake the resolved path must still be
inside the lake root, so a symlink planted in the lake cannot lead out of it.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fastapi import HTTPException
from fastapi.responses import Response

from aigc.lake import Lake, LakeKeyError, LocalLake
from aigc.lake.keys import validate_key

SERVED_ROOTS = frozenset({"training", "generations", "evaluations", "quality"})
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",  # evaluation reports and GX Data Docs
    ".css": "text/css; charset=utf-8",  # Data Docs' styles
    ".png": "image/png",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
}
MAX_BYTES = 32 << 20  # the largest of these is a gallery PNG of a few MB
STAGE_OF_ROOT = {"training": "train", "generations": "generate", "evaluations": "evaluate"}
STAGE_OF_GATE = {"curated": "prepare", "training": "train", "deploy": "deploy", "generate": "generate",
                 "evaluation": "evaluate"}
"""quality/<gate>/…: the stage whose gate wrote it."""


def stage_of(key: str) -> str:
    """The stage whose DAG published ``key`` (its readers may see it); 404 for a key the view never serves."""
    parts = servable_key(key).split("/")
    stage = STAGE_OF_ROOT.get(parts[0]) or (STAGE_OF_GATE.get(parts[1]) if len(parts) > 1 else None)
    if stage is None:
        raise HTTPException(404, f"no stage publishes {key}")
    return stage


def servable_key(key: str) -> str:
    """``key`` if the view may serve it; HTTPException 400 (malformed) or 404 (not served) otherwise."""
    try:
        validate_key(key)
    except LakeKeyError as e:
        raise HTTPException(400, f"bad lake key: {e}") from None
    parts = key.split("/")
    # "_…" files are the pipeline's own records (a run's summary, markers, the training nodes' rendezvous: an
    # endpoint that exchanges pickles), not something to show; Data Docs' "__none__" folders are fine.
    if parts[0] not in SERVED_ROOTS or any(p.startswith(".") for p in parts) or parts[-1].startswith("_"):
        raise HTTPException(404, f"the AIGC view serves only objects under {sorted(SERVED_ROOTS)}")
    if PurePosixPath(key).suffix not in CONTENT_TYPES:
        raise HTTPException(404, f"the AIGC view serves only {sorted(CONTENT_TYPES)} files")
    return key


def lake_object(lake: Lake, key: str) -> Response:
    """The object at ``key`` as an HTTP response with its content type."""
    key = servable_key(key)
    if isinstance(lake, LocalLake) and not (lake.root / key).resolve().is_relative_to(lake.root):
        raise HTTPException(404, "not in the lake")
    try:
        if lake.size(key) > MAX_BYTES:
            raise HTTPException(413, f"{key} is larger than the view serves ({MAX_BYTES} bytes)")
        data = lake.get_bytes(key)
    except (FileNotFoundError, IsADirectoryError, LakeKeyError):  # ObjectNotFound is a FileNotFoundError
        raise HTTPException(404, f"no object {key} in the lake") from None
    # Run folders are immutable once written, but a report is re-written with gate 5's verdict: short cache.
    return Response(data, media_type=CONTENT_TYPES[PurePosixPath(key).suffix],
                    headers={"Cache-Control": "private, max-age=60"})
