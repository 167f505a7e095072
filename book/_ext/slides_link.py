"""Sphinx extension for the book: a link to the chapter's lecture slides at the top of every
numbered chapter (book/01_... to book/12_...), to the deck `.ci/build-slides` cuts from the
built page into ``slides/`` (relative link; `.ci/browser-test` fails when a deck is missing).
Enabled in ``_config.yml`` under ``sphinx: local_extensions``."""
from __future__ import annotations

import re

LINK = ('<p class="slides-link">Lecture slides for this chapter: <a class="reference external" '
        'href="../slides/{stem}.html">open the deck</a> (arrow keys or swipe; print for handouts). '
        "They show this page's equations, figures and numbers, cut from the built page.</p>\n")


def setup(app):
    def add(app, pagename, templatename, context, doctree):
        m = re.fullmatch(r"book/(\d\d_\w+)", pagename)          # pages live in book/: one level up
        if m and "body" in context:
            context["body"] = LINK.format(stem=m.group(1)) + context["body"]
    app.connect("html-page-context", add)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
