"""The lake on a local folder: the embedded default for a laptop and for tests."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from aigc.lake.base import Lake, ObjectNotFound, PreconditionFailed
from aigc.lake.keys import LakeKeyError

_TMP_PREFIX = ".tmp-"  # half-written files; never listed, never read


def _etag(data: bytes) -> str:
    # The same shape as S3's single-part ETag, so callers treat both backends alike.
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


class LocalLake(Lake):
    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next(p for p in (self.root, *self.root.parents) if p.exists() and not p.is_dir())
            raise NotADirectoryError(
                f"the lake path {self.root} cannot be a folder: {blocker} is a file. Point AIGC_LAKE_URI (or --lake) "
                "at a folder (it is created if missing) or at s3://bucket/prefix") from None
        self._root_str = str(self.root)
        self.uri = self.root.as_uri()
        self._fs = pafs.LocalFileSystem()

    def _path(self, key: str) -> Path:
        """Where a write goes: resolved, so a symlink planted inside the lake cannot lead out of it."""
        path = (self.root / key).resolve() if key else self.root
        if path != self.root and self.root not in path.parents:
            raise LakeKeyError(f"lake key {key!r} resolves outside the lake root {self.root}")
        return path

    def _read_path(self, key: str) -> str:
        # Reads skip the per-component lstat of resolve(): keys are validated (no '..', not
        # absolute), and a hot loop of small reads (one per image) pays for every syscall.
        return os.path.join(self._root_str, key)

    def _put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if if_none_match:
                try:
                    os.link(tmp, path)  # atomic create-if-absent
                except FileExistsError:
                    raise PreconditionFailed(f"{self.url(key)} already exists") from None
            elif if_match is not None:
                # Compare-and-swap under a lock on the folder: readers never take it, writers
                # that race on the same key serialise here and the loser sees a new ETag.
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    fcntl.flock(dir_fd, fcntl.LOCK_EX)
                    current = _etag(path.read_bytes()) if path.exists() else None
                    if current != if_match:
                        raise PreconditionFailed(
                            f"{self.url(key)} changed: expected ETag {if_match}, found {current}"
                        )
                    os.replace(tmp, path)
                finally:
                    os.close(dir_fd)
            else:
                os.replace(tmp, path)  # atomic: readers see the old or the new object
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return _etag(data)

    def _get(self, key: str) -> tuple[bytes, str]:
        data = self._read(key)
        return data, _etag(data)

    def _read(self, key: str) -> bytes:
        try:
            with open(self._read_path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(f"{self.url(key)} does not exist") from None

    def _exists(self, key: str) -> bool:
        return os.path.isfile(self._read_path(key))

    def _size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url(key)} does not exist") from None

    def _list(self, prefix: str, recursive: bool = True) -> Iterator[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if not base.is_dir():
            return
        if not recursive:
            for entry in os.scandir(base):
                if entry.is_file() and not entry.name.startswith(_TMP_PREFIX):
                    yield Path(entry.path).relative_to(self.root).as_posix()
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if not name.startswith(_TMP_PREFIX):
                    yield (Path(dirpath) / name).relative_to(self.root).as_posix()

    def _delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        self._prune(path.parent)

    def _delete_many(self, keys: list[str]) -> None:
        # Folders are pruned once, after every file is gone: checking a folder after each of its n files costs
        # n² (a folder's first entry is found by reading past the holes its deleted entries left).
        folders = set()
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            folders.add(path.parent)
        for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):  # deepest first
            self._prune(folder)

    def _prune(self, folder: Path) -> None:
        """Drop ``folder`` and its ancestors while they are empty, so a deleted partition leaves no trace."""
        for parent in (folder, *folder.parents):
            if parent == self.root or not parent.is_dir() or not _is_empty(parent):
                break
            parent.rmdir()

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        return self._fs

    def arrow_path(self, key: str) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _rooted(self, prefix: str) -> Lake:
        return LocalLake(self._path(prefix))


def _is_empty(folder: Path) -> bool:
    """Whether ``folder`` holds nothing, reading at most its first entry (``Path.iterdir`` lists it all)."""
    with os.scandir(folder) as entries:
        return next(entries, None) is None
