"""Several training nodes that do not know each other's addresses in advance: they meet through the lake.

Airflow places each node's task on whichever worker takes it, so no host can be named in the form. Node 0 (the
``train`` task, or ``aigc train --node-rank 0``) picks its own address and a free port, writes them to
``<training run>/_rendezvous.json``, and its torchrun hosts the c10d rendezvous there; the other nodes poll that
object (with a deadline) and join. The run id, the same for every node of a DAG run, names the object, and it is
also torchrun's rendezvous id.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Callable

from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join
from aigc.train.artifacts import training_run_prefix

RENDEZVOUS = "_rendezvous.json"
HOST_ENV, PORT_ENV = "AIGC_RDZV_HOST", "AIGC_RDZV_PORT"


class RendezvousTimeout(TimeoutError):
    """Node 0 did not announce its endpoint in time."""


def rendezvous_key(model: str, date: str, run_id: str) -> str:
    return join(training_run_prefix(model, date, run_id), RENDEZVOUS)


def announce(lake: Lake, key: str, started: float | None = None) -> str:
    """Node 0: this host's address (``AIGC_RDZV_HOST``, else its fully qualified name) and a port (``AIGC_RDZV_PORT``,
    else a free one) written to ``key``; the ``host:port`` endpoint."""
    host = os.environ.get(HOST_ENV) or socket.getfqdn()
    port = int(os.environ.get(PORT_ENV) or 0) or _free_port()
    endpoint = f"{host}:{port}"
    lake.put_json(key, {"endpoint": endpoint, "announced_at": dt.datetime.now(dt.UTC).isoformat(),
                        "started": started if started is not None else time.time()})
    return endpoint


def await_endpoint(lake: Lake, key: str, timeout_s: float, *, poll_s: float = 2.0,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """The other nodes: node 0's endpoint, once announced (``RendezvousTimeout`` after ``timeout_s``)."""
    deadline = clock() + timeout_s
    while True:
        try:
            return lake.get_json(key)["endpoint"]
        except ObjectNotFound:
            pass
        if clock() >= deadline:
            raise RendezvousTimeout(
                f"node 0 of the training run did not announce its rendezvous at {lake.url(key)} within "
                f"{timeout_s:.0f} s: is its task (`train`) running? Every node needs a worker at the same time (the "
                "`gpu` pool needs a slot per node)")
        sleep(poll_s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
