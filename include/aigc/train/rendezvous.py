"""Several training nodes that do not know each other's addresses in advance: they meet through the lake.

Airflow places each node's task on whichever worker takes it, so no host can be named in the form. Node 0 (the
``train`` task, or ``aigc train --node-rank 0``) picks its own address and a free port, writes them to
``<training run>/_rendezvous.json``, and its torchrun hosts the c10d rendezvous there; the other nodes poll that
object (with a deadline) and join. The run id, the same for every node of a DAG run, names the object, and it is
also torchrun's rendezvous id.

The record is trusted only as far as it is bound: it is created once (a conditional write; node 0, which owns the
key, replaces whatever else is there with If-Match on what it read), it names its run and its key, and where the
deployment sets ``AIGC_RDZV_SECRET`` (the compose file requires it) it carries an HMAC-SHA256 of its content under
that secret, without which no node joins it. Write access to the lake then cannot send the nodes to another
endpoint: torch's rendezvous exchanges pickled state with that endpoint
(``torch.distributed.elastic.rendezvous.dynamic_rendezvous``), so an endpoint is code execution. For the same
reason the port node 0 opens must be reachable from the training nodes only: node 0 announces the address the
deployment names (``AIGC_RDZV_HOST``, also torchrun's ``--local-addr``), but torch's TCPStore listens on that port
on every interface, so the deployment's network (or a firewall) must keep it from anyone else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

from aigc.lake import Lake, ObjectNotFound, PreconditionFailed
from aigc.lake.keys import join
from aigc.train.artifacts import training_run_prefix

log = logging.getLogger(__name__)
RENDEZVOUS = "_rendezvous.json"
HOST_ENV, PORT_ENV, SECRET_ENV = "AIGC_RDZV_HOST", "AIGC_RDZV_PORT", "AIGC_RDZV_SECRET"


class RendezvousRefused(PermissionError):
    """Node 0 could not replace the record at its key: another process wrote it again meanwhile."""


class RendezvousTimeout(TimeoutError):
    """Node 0 did not announce its endpoint in time."""


def rendezvous_key(model: str, date: str, run_id: str) -> str:
    return join(training_run_prefix(model, date, run_id), RENDEZVOUS)


def announce(lake: Lake, key: str, run_id: str, started: float | None = None) -> str:
    """Node 0: this host's address (``AIGC_RDZV_HOST``, else its fully qualified name) and a port (``AIGC_RDZV_PORT``,
    else a free one on that address) written to ``key``, bound to ``run_id``; the ``host:port`` endpoint.
    Whatever else ``key`` holds (an earlier try's record, one planted there) is replaced; RendezvousRefused only if
    it changes again while node 0 replaces it."""
    host = os.environ.get(HOST_ENV) or socket.getfqdn()
    port = int(os.environ.get(PORT_ENV) or 0) or _free_port(os.environ.get(HOST_ENV) or "")
    record = signed({"endpoint": f"{host}:{port}", "run_id": run_id, "key": key, "nonce": secrets.token_hex(8),
                     "announced_at": dt.datetime.now(dt.UTC).isoformat(),
                     "started": started if started is not None else time.time()})
    data = json.dumps(record, sort_keys=True).encode()
    try:
        lake.put_if_absent(key, data)
    except PreconditionFailed:  # a retry of node 0, or a record planted before it: node 0 owns this key
        body, etag = lake.get_with_etag(key)
        found = _parse(body)
        if not (found is not None and _joinable(found, key, run_id)):
            log.warning("replacing a rendezvous record at %s that no node of run %s would join: %r", lake.url(key),
                        run_id, found)
        try:
            lake.put_if_match(key, data, etag)
        except PreconditionFailed:
            raise RendezvousRefused(f"{lake.url(key)} changed while node 0 of run {run_id} replaced it: another "
                                    "process writes this run's rendezvous; start the run with a new run id") from None
    if _secret() is None:
        log.warning("the rendezvous record at %s is not signed: set %s on every training node so that write access "
                    "to the lake cannot redirect the nodes", lake.url(key), SECRET_ENV)
    return record["endpoint"]


def await_endpoint(lake: Lake, key: str, run_id: str, timeout_s: float, *, poll_s: float = 2.0,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """The other nodes: node 0's endpoint, once a record of ``run_id`` is announced and (with ``AIGC_RDZV_SECRET``)
    signed with the deployment's secret (``RendezvousTimeout`` after ``timeout_s``). A record that is not is never
    joined: the node waits for node 0 to replace it."""
    deadline = clock() + timeout_s
    seen_bad = None
    while True:
        try:
            found = _parse(lake.get_bytes(key))
        except ObjectNotFound:
            found = None
        else:
            if found is not None and _joinable(found, key, run_id):
                return found["endpoint"]
            seen_bad = found
        if clock() >= deadline:
            why = (f"; the record there is not this run's or not signed with {SECRET_ENV}: {seen_bad!r}"
                   if seen_bad is not None else "")
            raise RendezvousTimeout(
                f"node 0 of the training run did not announce its rendezvous at {lake.url(key)} within "
                f"{timeout_s:.0f} s{why}: is its task (`train`) running? Every node needs a worker at the same time "
                "(the `gpu` pool needs a slot per node)")
        sleep(poll_s)


def signed(record: dict) -> dict:
    """``record`` with its HMAC under the deployment's secret (none without one)."""
    secret = _secret()
    return {**record, "signature": _mac(secret, record)} if secret is not None else dict(record)


def _joinable(record: dict, key: str, run_id: str) -> bool:
    """A record of this run at this key, signed with this deployment's secret (without a secret: any record that
    names them, a laptop's). The key is signed too, so a record copied from another run's key is refused."""
    if record.get("run_id") != run_id or record.get("key") != key:
        return False
    secret = _secret()
    if secret is None:
        return True
    body = {k: v for k, v in record.items() if k != "signature"}
    signature = record.get("signature")
    return isinstance(signature, str) and hmac.compare_digest(signature.encode("utf-8", "replace"),
                                                              _mac(secret, body).encode())


def _mac(secret: bytes, record: dict) -> str:
    return hmac.new(secret, json.dumps(record, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _secret() -> bytes | None:
    value = os.environ.get(SECRET_ENV)
    return value.encode() if value else None


def _parse(body: bytes) -> dict | None:
    try:
        found = json.loads(body)
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("endpoint"), str) else None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
