"""Links from a session page to its trace and its Grafana panel, when the user configured where
those live (``kubectl berth ui --trace-url-template`` / ``--grafana-url``, or
``BERTH_UI_TRACE_URL_TEMPLATE`` / ``BERTH_UI_GRAFANA_URL``); without them the page shows no link.

A template may name, in braces: ``{namespace}``, ``{name}``, ``{session}`` (``<namespace>/<name>``,
the ``berth.session`` attribute of the runtime's spans), ``{uid}``, ``{runId}`` (the current or
last run, the ``berth.run.id`` attribute) and ``{correlationId}``; each is replaced by its value,
URL-encoded. Other braces are kept as they are, so a TraceQL or Jaeger tag query may be written
literally. A Grafana URL without a placeholder gets ``var-namespace=<namespace>`` appended (the
chart's dashboard has that variable). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from kubectl_berth.errors import PluginError

PLACEHOLDERS = ("namespace", "name", "session", "uid", "runId", "correlationId")
"""The names a template may use, in braces."""


@dataclass(frozen=True)
class Links:
    """Where the user's traces and dashboards live (None: not configured, no link)."""

    trace_url_template: str | None = None
    grafana_url: str | None = None

    def __post_init__(self) -> None:
        for flag, url in (
            ("--trace-url-template", self.trace_url_template),
            ("--grafana-url", self.grafana_url),
        ):
            if url is not None and urlsplit(url).scheme not in ("http", "https"):
                raise PluginError(f"{flag} must be an http(s) URL, got {url!r}")


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``{placeholder}`` of :data:`PLACEHOLDERS` replaced by its value in
    ``values`` (URL-encoded; missing: empty)."""
    for key in PLACEHOLDERS:
        template = template.replace("{" + key + "}", quote(values.get(key, ""), safe=""))
    return template


def session_links(links: Links, values: Mapping[str, str]) -> list[tuple[str, str]]:
    """(label, URL) of the trace and Grafana links for a session described by ``values`` (keys:
    :data:`PLACEHOLDERS`); only those configured."""
    found: list[tuple[str, str]] = []
    if links.trace_url_template:
        found.append(("Trace", fill(links.trace_url_template, values)))
    if links.grafana_url:
        url = links.grafana_url
        if not any("{" + key + "}" in url for key in PLACEHOLDERS):
            url += ("&" if "?" in url else "?") + "var-namespace={namespace}"
        found.append(("Grafana", fill(url, values)))
    return found
