"""The web console served at ``/console/`` on the HTTP port (docs/console.md).

:class:`WebConsole` answers the paths :class:`pylmq.api.http.HttpApi` does not route under
``/console``: the static page (``assets/``, shipped as package data) and its read-only JSON
routes under ``/console/api/``. The page itself changes queues through the ordinary HTTP API.
"""

from __future__ import annotations

from pylmq.api.web.server import ClusterView, WebConsole

__all__ = ["ClusterView", "WebConsole"]
