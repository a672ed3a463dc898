"""The model registry: immutable versions and movable aliases, in the lake.

    models/<name>/v0007/_CLAIM.json          the number is taken (a conditional create)
    models/<name>/v0007/model.safetensors    fp32 weights, copied from the training run
    models/<name>/v0007/model.json           config, vocabulary, lineage, training metrics
    models/<name>/v0007/variants/<v>/…       optimised variants (variants.py)
    models/<name>/v0007/version.json         written last: a version exists once this does
    models/<name>/aliases.json               {"aliases": {...}, "history": [...]}, replaced by CAS

Numbers are taken by creating ``_CLAIM.json`` with If-None-Match, so two runs registering at
once get different numbers. ``aliases.json`` is replaced with If-Match on the ETag read, so
two moves racing cannot both win against the same state; an alias only ever points at a
version whose ``version.json`` exists, never at a half-written one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re

from aigc.lake import Lake
from aigc.lake.base import ObjectNotFound, PreconditionFailed
from aigc.lake.cas import create_json, update_json
from aigc.lake.keys import join, validate_name

ALIASES = ("candidate", "production", "previous", "best")
"""``best``: the version that measured best of those gate 5 made production (on the evaluations that compared
them); a candidate significantly worse than it is never promoted, so a chain of slightly worse ones cannot walk
production down."""
VERSION_FILE = "version.json"
ALIAS_FILE = "aliases.json"
_VERSION = re.compile(r"^v(\d{4,})$")
_CAS_ATTEMPTS = 20


class VersionNotFound(LookupError):
    """A version or alias that the registry does not have."""


class RegistryCorrupt(RuntimeError):
    """A registry file that cannot be read as what it should be; nothing was changed."""


class AliasError(ValueError):
    """An alias move that is not allowed (unknown alias, nothing to roll back to)."""


def version_name(number: int) -> str:
    return f"v{number:04d}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Registry:
    """Versions and aliases of one model name."""

    def __init__(self, lake: Lake, name: str):
        self.lake, self.name = lake, validate_name("model", name)
        self.prefix = join("models", name)

    # -- versions -----------------------------------------------------------------------
    def version_prefix(self, version: str) -> str:
        if not _VERSION.match(version or ""):
            raise VersionNotFound(f"{version!r} is not a version name (v0001, v0002, …) nor an alias {ALIASES}")
        return join(self.prefix, version)

    def versions(self) -> list[dict]:
        """Every complete version (its version.json exists), oldest first."""
        names = sorted({k.split("/")[2] for k in self.lake.list(self.prefix) if k.endswith("/" + VERSION_FILE)})
        return [self._read_json(join(self.prefix, n, VERSION_FILE)) for n in names if _VERSION.match(n)]

    def get(self, ref: str) -> dict:
        """A version's record, by name (``v0003``) or by alias (``production``)."""
        version = self.resolve(ref)
        key = join(self.version_prefix(version), VERSION_FILE)
        if not self.lake.exists(key):
            known = [v["version"] for v in self.versions()]
            raise VersionNotFound(f"model {self.name!r} has no version {version!r} "
                                  f"({self.lake.url(key)} does not exist); versions: {known or 'none'}")
        return self._read_json(key)

    def resolve(self, ref: str) -> str:
        if ref in ALIASES:
            target = self.aliases()["aliases"].get(ref)
            if not target:
                raise VersionNotFound(f"alias {ref!r} of model {self.name!r} points at nothing yet")
            return target
        self.version_prefix(ref)  # validates the name
        return ref

    def claim_next(self) -> tuple[str, str]:
        """Take the next free version number; returns (version, its prefix)."""
        taken = [int(m.group(1)) for k in self.lake.list(self.prefix)
                 if (m := _VERSION.match(k.split("/")[2]))]
        number = max(taken, default=0) + 1
        for _ in range(_CAS_ATTEMPTS):
            version = version_name(number)
            if create_json(self.lake, join(self.prefix, version, "_CLAIM.json"),
                           {"version": version, "claimed_at": _now()}):
                return version, join(self.prefix, version)
            number += 1  # another run took it first
        raise PreconditionFailed(f"could not claim a version number under {self.lake.url(self.prefix)}")

    def complete(self, version: str, record: dict) -> dict:
        """Write version.json (once): from now on the version exists and aliases may point at it."""
        record = {"model": self.name, "version": version, "registered_at": _now(), **record}
        key = join(self.version_prefix(version), VERSION_FILE)
        written = create_json(self.lake, key, record)
        if written is None:
            raise PreconditionFailed(f"{self.lake.url(key)} was written by another run: version {version} is not ours")
        return written

    def update_record(self, version: str, **fields) -> dict:
        """Add fields (variants, smoke-test verdicts) to a version's record; weights never change."""
        key = join(self.version_prefix(version), VERSION_FILE)

        def add(record: dict | None) -> dict:
            if record is None:
                raise VersionNotFound(f"{self.lake.url(key)} does not exist: version {version} was never completed")
            return {**record, **fields}

        return update_json(self.lake, key, add, what="record update", parse=self._parse_url)

    # -- aliases ------------------------------------------------------------------------
    def aliases(self) -> dict:
        key = join(self.prefix, ALIAS_FILE)
        try:
            raw = self.lake.get_bytes(key)
        except ObjectNotFound:
            return {"aliases": {}, "history": []}
        doc = self._parse(raw, key)
        if not isinstance(doc.get("aliases"), dict) or not isinstance(doc.get("history"), list):
            raise RegistryCorrupt(f"{self.lake.url(key)} must hold {{'aliases': {{…}}, 'history': […]}}; "
                                  "fix or restore it (nothing was changed)")
        return doc

    def move(self, alias: str, version: str, *, reason: str = "") -> dict:
        """Point ``alias`` at ``version`` (which must be complete); moving ``production`` keeps the old one
        as ``previous``. Returns the new alias document."""
        if alias not in ALIASES:
            raise AliasError(f"unknown alias {alias!r}; aliases are {ALIASES}")
        self.get(version)  # complete versions only

        def change(aliases: dict) -> list[tuple[str, str | None, str]]:
            moves = []
            if alias == "production" and aliases.get("production") not in (None, version):
                moves.append(("previous", aliases.get("previous"), aliases["production"]))
            moves.append((alias, aliases.get(alias), version))
            return moves

        return self._update(change, reason or f"{alias} → {version}")

    def decide(self, version: str, *, promote: bool, reason: str, evaluation: str, date: str,
               best: bool = False) -> dict:
        """Gate 5's decision on ``version``, in one compare-and-swap: ``production`` moves to it (if ``promote`` and
        it is not production already), and ``best`` too when it measured at least as good as ``best`` (or there is
        none yet); the decision joins the aliases' ``decisions``, whether it moved or not. The same decision again
        (a retry) changes nothing more."""
        self.get(version)  # complete versions only

        def change(aliases: dict) -> list[tuple[str, str | None, str]]:
            if not promote or aliases.get("production") == version:
                return []
            moves = [("previous", aliases.get("previous"), aliases["production"])] if aliases.get("production") \
                else []
            if best or not aliases.get("production"):
                moves.append(("best", aliases.get("best"), version))
            elif not aliases.get("best"):  # a registry from before ``best``: production measured better, so it is
                moves.append(("best", None, aliases["production"]))
            return [*moves, ("production", aliases.get("production"), version)]

        decided = {"version": version, "date": date, "evaluation": evaluation, "promoted": promote, "reason": reason,
                   "best": best}
        return self._update(change, reason, decision=decided)

    def rollback(self, *, reason: str = "") -> dict:
        """``production`` back to ``previous``; ``previous`` to the production before that (if any)."""
        def change(aliases: dict) -> list[tuple[str, str | None, str | None]]:
            current, previous = aliases.get("production"), aliases.get("previous")
            if not previous:
                raise AliasError(f"model {self.name!r} has no 'previous' version to roll back to")
            return [("production", current, previous), ("previous", previous, self._before(previous, current))]

        return self._update(change, reason or "rollback")

    def _before(self, version: str, skip: str | None) -> str | None:
        """The production version before ``version`` became production, per the history."""
        history = [h for h in self.aliases()["history"] if h["alias"] == "production"]
        for h in reversed(history):
            if h["to"] == version and h["from"] not in (None, skip, version):
                return h["from"]
        return None

    def _update(self, change, reason: str, decision: dict | None = None) -> dict:
        key = join(self.prefix, ALIAS_FILE)

        def apply(doc: dict | None) -> dict:
            doc = doc or {"aliases": {}, "history": []}
            decisions = list(doc.get("decisions", []))
            if decision and any({k: d.get(k) for k in decision} == decision for d in decisions):
                return doc  # this very decision is recorded: a retry after its reply was lost
            aliases = dict(doc["aliases"])
            moves = change(aliases)
            at = _now()
            for alias, _old, new in moves:
                if new is None:
                    aliases.pop(alias, None)
                else:
                    aliases[alias] = new
            history = doc["history"] + [{"alias": a, "from": o, "to": n, "at": at, "reason": reason}
                                        for a, o, n in moves]
            if decision:
                decisions.append({**decision, "at": at})
            return {"model": self.name, "aliases": aliases, "history": history, "updated_at": at,
                    **({"decisions": decisions} if decisions else {})}

        return update_json(self.lake, key, apply, what="alias move", parse=self._parse_url)

    # -- helpers ------------------------------------------------------------------------
    def _read_json(self, key: str) -> dict:
        return self._parse(self.lake.get_bytes(key), key)

    def _parse(self, raw: bytes, key: str) -> dict:
        return self._parse_url(raw, self.lake.url(key))

    @staticmethod
    def _parse_url(raw: bytes, url: str) -> dict:
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise RegistryCorrupt(f"{url} is not valid JSON ({e}); fix or restore it (nothing was changed)") from None
        if not isinstance(doc, dict):
            raise RegistryCorrupt(f"{url} must hold a JSON object, got {type(doc).__name__}")
        return doc


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
