"""The web dashboard served by the API process under ``/ui`` (docs/dashboard.md).

Server-rendered HTML and one stylesheet, all in this package: nothing is loaded from another
origin and no script runs. ``routes`` reads through the REST API's tenant-scoped store
functions; ``session`` keeps the token in an HttpOnly, SameSite=Strict cookie and guards the
forms with a CSRF token; ``chart`` draws the forecast as SVG; ``pages`` and ``layout`` build the
HTML.
"""

from __future__ import annotations

from .routes import router

__all__ = ["router"]
