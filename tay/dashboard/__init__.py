"""The dashboard: server-rendered pages under ``/ui/`` on the HTTP listener
(docs/dashboard.md).

It reads and acts only through the operations API (``AdminService.call``, the entry both
transports use) and imports nothing from ``tay.server``: the listener mounts a
``Dashboard`` and hands it the admin call. Pages read without JavaScript; the vendored
htmx (``static/htmx.min.js``, version and licence in docs/dashboard.md) only refreshes
them in place.
"""

from .app import Dashboard

__all__ = ["Dashboard"]
