"""What the Hugging Face workloads share about a model folder: the refusal of a Hub id, the local copy of a folder
kept in a lake, and the hashes that pin a folder's files.

* ``refuse_hub_id``: nothing is downloaded while the pipeline runs, so a name that looks like a Hub id
  (``org/model``) and is no folder gets a message saying to download it once and pass the folder.
* ``checked_folder``: the local folder a base's or a scorer's location names, checked by the folder's own rules.
* ``materialise``: a folder in a lake (``s3://…``, ``file://…``) is copied once into this machine's cache
  (``cache_root``: ``AIGC_HF_CACHE``, default ``~/.cache/aigc/hf-bases``, which also holds the demo bases), keyed
  by its listing (names, sizes, versions; a file replaced there is copied again), so every process of a run loads
  the same bytes from disk; sizes are checked against the listing and the copy is checked like a local folder
  before anything loads it.
* ``file_hashes``: each layout file's sha256 by its path in the folder (what a model card pins).
* ``built_once``: a demo base, built once per host in the same cache by whichever process gets there first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aigc.lake import Lake

CACHE_SETTING = "AIGC_HF_CACHE"
log = logging.getLogger(__name__)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
"""Weight files that are pickles: loading one runs code, so a folder holding only these is refused."""


class BaseModelError(ValueError):
    """A base model that is missing or that cannot be loaded safely: the message says what to do."""


def cache_root() -> Path:
    """Where base models are kept on this machine: the demo bases built here and the copies of bases in a lake."""
    return Path(os.environ.get(CACHE_SETTING) or Path.home() / ".cache" / "aigc" / "hf-bases")


def built_once(name: str, build: Callable[[Path], object], what: str) -> Path:
    """The folder ``name`` in this machine's cache, built there once by ``build(folder)``: whichever process gets there
    first builds in a folder of its own and renames it (a loser's copy is removed; the same seed and pinned packages
    give it the same files). ``what`` says what was built, in the one warning a host logs."""
    folder = cache_root() / name
    if (folder / ".complete").exists():
        return folder
    staging = cache_root() / f".{name}-{uuid.uuid4().hex[:8]}"
    try:
        build(staging)
        (staging / ".complete").write_text(name)
        try:
            staging.rename(folder)
            log.warning("built %s in %s, with RANDOM weights (no base was given: set base_model_uri to your "
                        "model's folder)", what, folder)
        except OSError:  # another process built it first: the same files
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def is_lake_uri(uri: str) -> bool:
    return "://" in uri


def refuse_hub_id(uri: str) -> None:
    """Raise where ``uri`` is no folder here but looks like a Hub id."""
    if not Path(uri).expanduser().exists() and HUB_ID.match(uri):
        raise BaseModelError(f"{uri!r} is not a folder; it looks like a Hugging Face Hub id, and nothing is "
                             "downloaded while the pipeline runs: download it once (huggingface-cli download "
                             f"{uri} --local-dir DIR, or snapshot_download), then pass the folder (or its copy "
                             "in the lake) as the base model")


def materialise(source: Lake, where: str, keep: Callable[[str], bool], check: Callable[[Path, str], object]) -> Path:
    """A local copy of the folder in ``source`` (its keys that ``keep`` names, subfolders included), made once per
    listing and passed through ``check`` (a folder's own rules) before it is used."""
    listing = sorted((k, size, version) for k, size, version in source.list_versions("") if keep(k))
    if not listing:
        raise BaseModelError(f"no base model at {where}: no file of the save_pretrained layout there")
    digest = hashlib.sha256(json.dumps([where, listing]).encode()).hexdigest()[:24]
    root = cache_root()
    folder = root / digest
    if (folder / ".complete").exists():
        return folder
    staging = root / f".{digest}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        for key, size, _ in listing:
            data = source.get_bytes(key)
            if len(data) != size:
                raise BaseModelError(f"{where}/{key} read {len(data)} bytes where the listing said {size}")
            (staging / key).parent.mkdir(parents=True, exist_ok=True)
            (staging / key).write_bytes(data)
        check(staging, where)
        (staging / ".complete").write_text(where)
        with contextlib.suppress(OSError):  # another process copied the same listing first: the same bytes
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def checked_folder(uri: str, s3, keep: Callable[[str], bool], check: Callable[[Path, str], object]) -> Path:
    """The local folder ``uri`` names, passed through ``check`` (a folder's own rules): a folder in a lake is copied
    once (``materialise``, its keys that ``keep`` names; read with ``s3``, else the standard AWS variables); a name
    that is no folder but looks like a Hub id is refused with what to do."""
    if is_lake_uri(uri):
        from aigc.lake import open_lake

        return materialise(open_lake(uri, s3), uri, keep, check)
    refuse_hub_id(uri)
    folder = Path(uri).expanduser()
    check(folder, uri)
    return folder.resolve()


@cache
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_hashes(folder: Path, keep: Callable[[str], bool], depth: int = 1) -> dict[str, str]:
    """sha256 of each file at most ``depth`` levels under ``folder`` whose path there (``unet/config.json``) ``keep``
    names; a file's hash is computed once per size and modification time in a process. Deeper files are not even
    listed: a user's folder may hold checkpoints or a repository's history, and serving fingerprints per shard."""
    files = {}
    for level in range(1, depth + 1):
        for p in folder.glob("/".join(["*"] * level)):
            name = p.relative_to(folder).as_posix()
            if p.is_file() and keep(name):
                st = p.stat()
                files[name] = _file_sha256(str(p), st.st_size, st.st_mtime_ns)
    return dict(sorted(files.items()))


def fingerprint_of(files: dict[str, str]) -> dict:
    """A folder's pin: its files' hashes and one over them all (the lineage a fine-tuned model records)."""
    return {"sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(), "files": files}
