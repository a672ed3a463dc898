"""An ASGI app built at its first request.

Airflow loads plugins in every process that might need one: the API server, the scheduler,
the dag-processor and every task process (for macros). Building the view there would import
FastAPI and the lake catalog (pyarrow, boto3) into each of them, about a second of CPU per
task, for an app that only the API server ever serves. The plugin mounts this stand-in
instead; the real app is built once, when the first request reaches it.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any


class LazyASGIApp:
    def __init__(self, factory: str):
        """``factory``: "module:function" returning the ASGI app, imported and called at first use."""
        self.factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    def app(self) -> Any:
        with self._lock:
            if self._app is None:
                module, function = self.factory.split(":")
                self._app = getattr(importlib.import_module(module), function)()
            return self._app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self.app()(scope, receive, send)

    def __repr__(self) -> str:  # what Airflow's plugin listing shows for the app
        return f"LazyASGIApp({self.factory!r})"
