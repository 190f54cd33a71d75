"""``kubectl berth ui``: a local web view of sessions, runs and workers (docs/ui.md).

- ``serve``   the command: a server on 127.0.0.1 only, the user's kubeconfig (:func:`serve`).
- ``app``     routes, page rendering and the live (server-sent events) parts.
- ``pages``   each page's template context; ``model`` the pure shaping; ``charts`` leather SVG.
- ``source``  the cluster reads and actions, and what the view samples while it runs.
- ``guard``   Host, Origin and form-token checks (cross-site request forgery, DNS rebinding).

Imported only by the ``ui`` command: the other commands never load aiohttp, Jinja2 or leather.
"""
