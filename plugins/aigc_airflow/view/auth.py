"""Only users the Airflow API server has authenticated see the AIGC view.

What Airflow 3.3 does (read from ``airflow/api_fastapi``), and so what this module relies on:

- ``app.py`` ``init_plugins`` mounts each plugin's ``fastapi_apps`` entry with
  ``app.mount(url_prefix, subapp)`` and nothing more: a plugin app gets **no** authentication
  of its own. The root app's middlewares (``JWTRefreshMiddleware`` among them) do run around it.
- Users log in through the auth manager (``SimpleAuthManager`` by default: ``/auth/login``,
  or ``POST /auth/token`` for API clients). The UI keeps its JWT in the HTTP-only cookie
  ``_token`` (``COOKIE_NAME_JWT_TOKEN`` in ``auth/managers/base_auth_manager.py``), scoped to
  ``[api] base_url``'s path, so a nav link or the UI's same-origin iframe of this view sends it.
- ``core_api/security.py`` ``get_user`` is the dependency every REST route uses: it takes
  ``Authorization: Bearer <jwt>`` first, else the ``_token`` cookie, and validates it with
  the auth manager's ``get_user_from_token`` (signature, audience, expiry, and the revoked-token
  list in the metadata DB). No token: 401; expired: 401; invalid or revoked: 403.

So ``require_user`` below is that same ``get_user``, called with Airflow's own bearer scheme:
no crypto or token parsing here. Being logged in is not enough: ``require_reader`` asks the auth manager
(whichever the deployment configured: simple, FAB, Keycloak …) for the custom view permission ``AIGC`` and for
read access to the DAGs whose publications a page shows (``is_authorized_custom_view`` and
``is_authorized_dag``, the checks behind Airflow's own ``requires_access_*`` dependencies). A stage's
publications are readable with read access to its DAG (``aigc_prepare`` … ``aigc_evaluate``) or to
``aigc_pipeline``, which runs every stage. With the simple auth manager every role reads every DAG; with FAB,
a role's ``can_read`` on ``DAG:aigc_<stage>`` and on the ``AIGC`` resource decide.

A browser (a GET asking for HTML, no ``Authorization`` header) that is refused is redirected
to the auth manager's login page (``get_url_login(next_url=...)``), which sends it back here
after login; API clients get the 401/403 JSON as from ``/api/v2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse
from starlette.exceptions import HTTPException

from aigc_airflow.assets import ALL_STAGES_DAG, STAGE_DAGS


async def require_user(request: Request):
    """The authenticated Airflow user of this request (a FastAPI dependency); 401/403 otherwise."""
    # Imported per request, not at plugin import: the plugin module is also loaded by
    # schedulers and task workers, which never serve this app.
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    return await get_user(request, _oauth_token=None, bearer_credentials=credentials)


VIEW_RESOURCE = "AIGC"


@dataclass(frozen=True)
class Reader:
    """An authenticated user and the stages whose publications they may read (at least one)."""

    user: object
    stages: frozenset[str]

    def require(self, *stages: str) -> None:
        """403 unless the user may read every one of ``stages``' DAGs."""
        missing = [STAGE_DAGS[s] for s in stages if s not in self.stages]
        if missing:
            raise NotAllowed(f"this page shows what {', '.join(missing)} published: it needs read access "
                             f"to those DAGs (or to {ALL_STAGES_DAG})")


class NotAllowed(HTTPException):
    """403 for a user who is logged in but not granted what a page shows: an answer, not a trip to the login page
    (which would send them straight back here, or round in a loop with single sign-on)."""

    def __init__(self, detail: str):
        super().__init__(403, detail)


def require_reader(user: Annotated[object, Depends(require_user)]) -> Reader:
    """The user, if the auth manager grants the AIGC view and read access to at least one aigc DAG; 403 otherwise.
    A plain function: FastAPI runs it in its thread pool, as Airflow's own ``requires_access_*`` (the auth manager
    may query a database or an identity provider)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    manager = get_auth_manager()
    if not manager.is_authorized_custom_view(method="GET", resource_name=VIEW_RESOURCE, user=user):
        raise NotAllowed(f"the AIGC view needs the {VIEW_RESOURCE!r} view permission")

    def reads(dag_id: str) -> bool:
        return manager.is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user)

    stages = frozenset(STAGE_DAGS) if reads(ALL_STAGES_DAG) else frozenset(s for s, d in STAGE_DAGS.items() if reads(d))
    if not stages:
        raise NotAllowed(f"the AIGC view shows what the aigc DAGs published: it needs read access to "
                         f"{ALL_STAGES_DAG} or to one of {sorted(STAGE_DAGS.values())}")
    return Reader(user, stages)


ReaderDep = Annotated[Reader, Depends(require_reader)]
"""A route's parameter: FastAPI runs require_reader once per request (the app's dependency and the route's)."""


async def refused(request: Request, exc: HTTPException):
    """Exception handler: a refused browser page view goes to the login page, anything else gets the error."""
    if exc.status_code in (401, 403) and not isinstance(exc, NotAllowed) and _is_browser_page_view(request):
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return await http_exception_handler(request, exc)


def _is_browser_page_view(request: Request) -> bool:
    # A client that sent a token chose API semantics: tell it why it was refused instead.
    return (request.method == "GET" and "authorization" not in request.headers
            and "text/html" in request.headers.get("accept", ""))
