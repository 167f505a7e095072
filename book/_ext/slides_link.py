"""Sphinx extension for the book: a link to the chapter's lecture slides at the top of every
numbered chapter (book/01_... to book/12_...). The decks are cut from the built book by
`.ci/build-slides` (book/_slides/build_slides.py) into ``slides/`` beside the pages; relative
links only, and `.ci/browser-test` fails when a deck is missing.

Enabled in ``_config.yml`` under ``sphinx: local_extensions``.
"""
from __future__ import annotations

import posixpath
import re

SLIDES_DIR = "slides"
_CHAPTER = re.compile(r"^book/(\d\d_\w+)$")


def slides_href(pagename: str) -> str | None:
    """The link from the page ``pagename`` to its deck, or None for a page without one."""
    m = _CHAPTER.match(pagename)
    if not m:
        return None
    up = posixpath.relpath(SLIDES_DIR, posixpath.dirname(pagename))
    return f"{up}/{m.group(1)}.html"


def _add_link(app, pagename, templatename, context, doctree):
    href = slides_href(pagename)
    if href is None or "body" not in context:
        return
    context["body"] = (
        f'<p class="slides-link">Lecture slides for this chapter: <a class="reference external" '
        f'href="{href}">open the deck</a> (arrow keys or swipe; print for handouts). They show this '
        f"page's equations, figures and numbers, cut from the built page.</p>\n" + context["body"])


def setup(app):
    app.connect("html-page-context", _add_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
