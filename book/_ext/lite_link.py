"""Sphinx extension for the book: a "run in your browser" link at the top of every exercise page,
to the same notebook in the JupyterLite site that `.ci/build-lite` builds into ``lite/`` beside
the book (Python in the browser page: nothing to install). Relative links only, so the book
works from any sub-path; `.ci/browser-test` fails when the link's target is missing.

Enabled in ``_config.yml`` under ``sphinx: local_extensions``.
"""
from __future__ import annotations

import posixpath
import re

LITE_DIR = "lite"
_EXERCISE = re.compile(r"^exercises/(\d\d_\w+)$")


def lite_href(pagename: str) -> str | None:
    """The link from the page ``pagename`` to its notebook in the site, or None."""
    m = _EXERCISE.match(pagename)
    if not m:
        return None
    up = posixpath.relpath(LITE_DIR, posixpath.dirname(pagename))
    return f"{up}/notebooks/index.html?path={m.group(1)}.ipynb"


def _add_link(app, pagename, templatename, context, doctree):
    href = lite_href(pagename)
    if href is None or "body" not in context:
        return
    context["body"] = (
        f'<div class="admonition tip lite-link"><p class="admonition-title">Run in your browser</p>'
        f'<p><a class="reference external" href="{href}">Open this notebook in JupyterLite</a>: '
        f"Python runs in the browser page, nothing to install (a school computer, a Chromebook "
        f"or a tablet will do). Its first cell installs what the notebook needs; the first start "
        f"downloads Python (Pyodide) once. Your edits stay in this browser.</p></div>\n"
        + context["body"])


def setup(app):
    app.connect("html-page-context", _add_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
