"""A few HTML building blocks: everything is escaped unless it is already ``Html``.

Lake content (captions, failure messages, run ids) is data written by tasks: it reaches a
page only through ``esc``. Pages have no scripts, and the app's CSP forbids them anyway.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass

from aigc_airflow.view.urls import LAKE_ROUTE, quote_key

CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{background:#1d2330;padding:.6em 1.5em}header a{color:#e8eefc;margin-right:1.5em;text-decoration:none}
main{padding:1em 1.5em;max-width:1200px}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;background:#fff}
td,th{border:1px solid #d8dce3;padding:4px 8px;text-align:left;vertical-align:top;font-size:.92em}
th{background:#eef1f6}code{font-size:.85em}.muted{color:#6b7280}ul{margin:0;padding-left:1.2em}
.pass{background:#d9f2e0;color:#135c2a}.fail{background:#fbdcdc;color:#8a1c1c}
.pass,.fail,.none{padding:1px 6px;border-radius:3px;font-weight:600;font-size:.85em}
td:first-child{white-space:nowrap}
img{max-width:min(100%,760px);image-rendering:pixelated;border:1px solid #d8dce3;background:#fff}
"""


class Html(str):
    """Markup that is already safe: inserted as is."""


def esc(value) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape(fmt(value)))


def fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def tag(name: str, content, **attrs) -> Html:
    rendered = "".join(f' {k.rstrip("_")}="{html.escape(str(v))}"' for k, v in attrs.items() if v is not None)
    return Html(f"<{name}{rendered}>{esc(content)}</{name}>")


def concat(parts: Iterable, sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


def link(href: str, text) -> Html:
    return tag("a", text, href=href)


def badge(success: bool | None) -> Html:
    if success is None:
        return tag("span", "not run", class_="none")
    return tag("span", "PASS" if success else "FAIL", class_="pass" if success else "fail")


def bullet_list(items: Iterable) -> Html:
    items = list(items)
    return tag("ul", concat(tag("li", i) for i in items)) if items else Html("")


def table(rows: list[dict], empty: str = "none") -> Html:
    """Rows of ``{column: value}`` (the first row's keys are the columns)."""
    if not rows:
        return tag("p", empty, class_="muted")
    head = tag("tr", concat(tag("th", c) for c in rows[0]))
    body = concat(tag("tr", concat(tag("td", v) for v in row.values())) for row in rows)
    return tag("table", concat([head, body]))


def key_value(pairs: dict) -> Html:
    """A two-column table: a name per row, then its value."""
    return tag("table", concat(tag("tr", concat([tag("th", k), tag("td", v)])) for k, v in pairs.items()))


@dataclass(frozen=True)
class Urls:
    """Links inside the view, relative to where it is mounted (``root``: e.g. ``/aigc``)."""

    root: str

    def page(self, *parts: str) -> str:
        return "/".join([self.root, *(quote_key(p) for p in parts)]) or "/"

    def lake(self, key: str) -> str:
        return f"{self.root}/{LAKE_ROUTE}/{quote_key(key)}"

    def image(self, key: str, alt: str) -> Html:
        return Html(f'<a href="{html.escape(self.lake(key))}"><img src="{html.escape(self.lake(key))}" '
                    f'alt="{html.escape(alt)}"></a>')


def layout(title: str, body, urls: Urls) -> str:
    nav = concat([link(urls.page(""), "Runs by date"), link(urls.page("registry"), "Model registry"),
                link(urls.page("latest"), "Latest report")])
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)} · AIGC</title>'
            f"<style>{CSS}</style></head><body><header>{nav}</header><main>{tag('h1', title)}{esc(body)}</main>"
            "</body></html>")
