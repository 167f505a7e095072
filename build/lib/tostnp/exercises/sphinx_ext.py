"""Sphinx extension for the book: writes every exercise notebook as an .ipynb under
``_build/exercise-notebooks/`` when the build starts, so that pages can offer it for download
with ``{download}`Name </_build/exercise-notebooks/NN_name.ipynb>``` (generated, never committed;
the ``.md`` in ``exercises/`` stays the one source).

Enabled in ``_config.yml`` under ``sphinx: extra_extensions``.
"""
from __future__ import annotations

from pathlib import Path

from . import notebook as nbk

OUT = Path("_build") / "exercise-notebooks"


def write_notebooks(srcdir) -> list[Path]:
    out = Path(srcdir) / OUT
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for p in nbk.notebooks(Path(srcdir) / "exercises"):
        nb = nbk.read(p)
        nb.metadata.pop("mystnb", None)          # a book setting, not for students
        nbk.write(nb, out / f"{p.stem}.ipynb")
        written.append(out / f"{p.stem}.ipynb")
    return written


def setup(app):
    app.connect("builder-inited", lambda app: write_notebooks(app.srcdir))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
