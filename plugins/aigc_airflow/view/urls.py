"""Where the AIGC view lives over HTTP: its mount point, its nav link, a lake object's URL.

The view is mounted under ``[api] base_url``'s path (``/`` unless Airflow runs under a
prefix). The nav link is a path, not a full URL, so the UI's iframe stays same-origin (and
sends the session cookie) however the user reached the UI; a task's extra link is a full URL
when ``base_url`` is set, like Airflow's own log links, because it is opened in a new tab.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

URL_PREFIX = "/aigc"
LAKE_ROUTE = "lake"  # /aigc/lake/<key>: objects served from the lake (see files.py)


def _base_url() -> str:
    from airflow.sdk.configuration import conf  # Airflow's config, in the API server and in a task alike

    return conf.get("api", "base_url", fallback="") or ""


def nav_href() -> str:
    """The view's entry page as a path: what the UI's iframe and nav link open."""
    root = urlsplit(_base_url()).path.rstrip("/")
    return f"{root}{URL_PREFIX}/"


def lake_object_url(key: str) -> str:
    """The view's URL of a lake object: absolute under ``[api] base_url`` if set, else a root path."""
    return f"{_base_url().rstrip('/')}{URL_PREFIX}/{LAKE_ROUTE}/{quote_key(key)}"


def quote_key(key: str) -> str:
    # '=' stays readable (dt=…/run=…): it is a legal path character.
    return quote(key, safe="/=")
