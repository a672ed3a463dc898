"""The lake on a local folder: the embedded default for a laptop and for tests.

It follows no symbolic link. A link planted in the lake (an image key that points at ``/etc/passwd``, a
folder that points at another tree) would let a read copy an outside file into quarantine or a delete remove
its target; so reads, writes and deletes refuse any key whose path passes through a link (naming it), and
listings leave links out (with a warning), as if they were not objects.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from aigc.lake.base import Lake, ObjectNotFound, PreconditionFailed
from aigc.lake.keys import LakeKeyError

log = logging.getLogger(__name__)
_TMP_PREFIX = ".tmp-"  # half-written files; never listed, never read
_FD_PATHS = "/proc/self/fd"  # Linux: where an open descriptor's real path is read in one call


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
        """Where ``key`` lives, refusing a path that passes through a symbolic link or resolves outside the root."""
        literal = self.root / key if key else self.root
        path = literal.resolve()
        if path == literal:
            return path
        if path != self.root and self.root not in path.parents:
            raise LakeKeyError(f"lake key {key!r} resolves outside the lake root {self.root}")
        raise self._link_error(key)

    def _link_error(self, key: str) -> LakeKeyError:
        link = next((p for p in (self.root / key, *(self.root / key).parents) if p.is_symlink()), self.root / key)
        return LakeKeyError(f"lake key {key!r} passes through the symbolic link {link}: the local lake follows no "
                            "links (replace it with the file itself)")

    def _open_read(self, key: str) -> int:
        """A descriptor on ``key``'s file, opened without following a link, and checked to be the file at the key's
        own path (so no folder on the way was a link either)."""
        path = os.path.join(self._root_str, key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"{self.url(key)} does not exist") from None
        except OSError as e:
            if e.errno == errno.ELOOP:  # the last component is a link
                raise self._link_error(key) from None
            raise
        try:
            real = os.readlink(f"{_FD_PATHS}/{fd}") if os.path.isdir(_FD_PATHS) else os.path.realpath(path)
            if real != path and real != path + " (deleted)":  # (deleted): replaced since we opened it, not a link
                raise self._link_error(key)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ObjectNotFound(f"{self.url(key)} does not exist (it is a folder)")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        path = self._path(key)
        fd, tmp = _temporary_file_beside(path)
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
        with open(self._open_read(key), "rb") as f:
            return f.read()

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url(key)} does not exist") from None

    def _list(self, prefix: str, recursive: bool = True) -> Iterator[str]:
        start = len(self._root_str) + 1
        return (entry.path[start:] for entry in self._entries(prefix, recursive))

    def _list_versions(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        start = len(self._root_str) + 1
        for entry in self._entries(prefix, recursive=True):
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # deleted since the folder was read
                continue
            yield entry.path[start:], st.st_size, f"mtime_ns:{st.st_mtime_ns}"

    def _entries(self, prefix: str, recursive: bool) -> Iterator[os.DirEntry]:
        """The files under ``prefix`` (no links, no half-written files)."""
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if not base.is_dir():
            return
        folders = [str(base)]
        while folders:
            try:
                scan = os.scandir(folders.pop())
            except FileNotFoundError:  # deleted since it was listed (another run's garbage collection): as on S3,
                continue  # a listing shows what is there when it gets to it
            with scan as entries:
                for entry in entries:
                    if entry.is_symlink():  # d_type: no extra call per entry
                        log.warning("%s is a symbolic link: the local lake leaves it out of listings and refuses to "
                                    "read or delete it", entry.path)
                    elif entry.is_dir():
                        if recursive:
                            folders.append(entry.path)
                    elif entry.is_file() and not entry.name.startswith(_TMP_PREFIX):
                        yield entry

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
            try:
                if parent == self.root or not _is_empty(parent):
                    break
                parent.rmdir()
            except FileNotFoundError:  # another deleter pruned it first: go on up
                continue
            except OSError as e:  # a writer put a file in it since: it stays
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    break
                raise

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        return self._fs

    def arrow_path(self, key: str) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _rooted(self, prefix: str) -> Lake:
        return LocalLake(self._path(prefix))


def _temporary_file_beside(path: Path, tries: int = 8) -> tuple[int, str]:
    """A new half-written file in ``path``'s folder, made if missing. A deleter pruning the emptied folder between
    the two steps (another run's garbage collection) makes it again."""
    for _ in range(tries - 1):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)
        except FileNotFoundError:
            continue
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)


def _is_empty(folder: Path) -> bool:
    """Whether ``folder`` holds nothing, reading at most its first entry (``Path.iterdir`` lists it all)."""
    with os.scandir(folder) as entries:
        return next(entries, None) is None
