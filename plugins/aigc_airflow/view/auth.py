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
no crypto or token parsing here. The view is read-only and asks for authentication only, not
a particular permission: every role may read what the pipeline published.

A browser (a GET asking for HTML, no ``Authorization`` header) that is refused is redirected
to the auth manager's login page (``get_url_login(next_url=...)``), which sends it back here
after login; API clients get the 401/403 JSON as from ``/api/v2``.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse
from starlette.exceptions import HTTPException


async def require_user(request: Request):
    """The authenticated Airflow user of this request (a FastAPI dependency); 401/403 otherwise."""
    # Imported per request, not at plugin import: the plugin module is also loaded by
    # schedulers and task workers, which never serve this app.
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    return await get_user(request, _oauth_token=None, bearer_credentials=credentials)


async def refused(request: Request, exc: HTTPException):
    """Exception handler: a refused browser page view goes to the login page, anything else gets the error."""
    if exc.status_code in (401, 403) and _is_browser_page_view(request):
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return await http_exception_handler(request, exc)


def _is_browser_page_view(request: Request) -> bool:
    # A client that sent a token chose API semantics: tell it why it was refused instead.
    return (request.method == "GET" and "authorization" not in request.headers
            and "text/html" in request.headers.get("accept", ""))
