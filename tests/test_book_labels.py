"""Every equation label cited outside Sphinx's reach is defined by the book.

Sphinx (-n -W) already fails on an undefined {eq} or {numref} inside a book page. It cannot see
the labels that the exercise notebooks, the README and the package's comments and docstrings
name as plain text (`eq-Rvar`), nor the equation number an exercise notebook writes as the text
of a link to a label (`eq. [(4.3)](#eq-Rvar)`: the book shows Sphinx's number and links to the
equation, JupyterLab shows the number written here): this test lists them all and checks each
against the book's sources (labels, and numbers as Sphinx assigns them: chapter of the
numbered part of _toc.yml, then the labelled display equations of the page in order).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LABEL_DEF = re.compile(r"^\$\$ \(([A-Za-z0-9_-]+)\)\s*$", re.M)     # $$ (eq-name) closes a display
LABEL_USE = re.compile(r"(?<![\w-])(eq-[A-Za-z0-9_-]*[A-Za-z0-9])")
EQ_LINK = re.compile(r"\[\(([0-9.]+)\)\]\(#(eq-[A-Za-z0-9_-]+)\)")
NAMED_EQ = re.compile(r"\beq\. \((?![0-9]|eq-)[^)]*\)")                  # eq. (Rvar): no such label


def book_equations() -> dict[str, tuple[str, str]]:
    """{label: (page, number as Sphinx prints it)} for every labelled display equation."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    numbered = [ch["file"] for part in toc["parts"] if part.get("numbered")
                for ch in part["chapters"]]
    out = {}
    for page in sorted(ROOT.glob("book/*.md")) + sorted(ROOT.glob("exercises/*.md")):
        doc = page.relative_to(ROOT).with_suffix("").as_posix()
        labels = LABEL_DEF.findall(page.read_text(encoding="utf-8"))
        for i, label in enumerate(labels, 1):
            assert label not in out, f"equation label {label} defined twice"
            num = f"{numbered.index(doc) + 1}.{i}" if doc in numbered else None
            out[label] = (doc, num)
    return out


def citing_files() -> list[Path]:
    files = sorted(ROOT.glob("exercises/*.md")) + sorted(ROOT.glob("book/*.md")) + [ROOT / "README.md"]
    files += sorted((ROOT / "tostnp").rglob("*.py"))
    files += sorted((ROOT / "exercises" / "instructor").rglob("*.md"))
    files += sorted((ROOT / "exercises" / "instructor").rglob("*.py"))
    return [f for f in files if f.is_file()]


def test_the_book_defines_the_labels_the_numbered_chapters_use():
    eqs = book_equations()
    assert len(eqs) >= 30
    # spot checks against the numbers Sphinx printed in a build of these pages
    assert eqs["eq-R"] == ("book/02_coding_rate", "2.1")
    assert eqs["eq-grad"] == ("book/05_gradient_tssa", "5.1")


def test_every_cited_equation_label_is_defined():
    defined = set(book_equations())
    missing = []
    n = 0
    for f in citing_files():
        for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for label in LABEL_USE.findall(line):
                n += 1
                if label not in defined:
                    missing.append(f"{f.relative_to(ROOT)}:{lineno}: {label}")
    assert n >= 30, f"only {n} label citations found: is the pattern still right?"
    assert not missing, "cited equation labels the book does not define:\n" + "\n".join(missing)


def test_no_equation_is_cited_by_an_invented_name():
    bad = []
    for f in citing_files():
        for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            bad += [f"{f.relative_to(ROOT)}:{lineno}: {m}" for m in NAMED_EQ.findall(line)]
    assert not bad, "cite a book label (eq-name) or a number, not a name:\n" + "\n".join(bad)


@pytest.mark.parametrize("nb", sorted(ROOT.glob("exercises/*.md")), ids=lambda p: p.stem)
def test_exercise_notebooks_cite_equations_by_number_and_link(nb):
    """A notebook is read in JupyterLab, where {eq} roles show as raw text: it cites an equation
    as a link to its label whose text is the number the book gives it."""
    eqs = book_equations()
    text = nb.read_text(encoding="utf-8")
    assert not re.search(r"`eq-[\w-]+`", text), f"{nb.name}: a bare label in backquotes; link it"
    assert "{eq}`" not in text, f"{nb.name}: an {{eq}} role shows as raw text in JupyterLab"
    links = EQ_LINK.findall(text)
    assert len(links) == len(re.findall(r"\]\(#eq-", text)), f"{nb.name}: a link to a label without its number"
    for num, label in links:
        assert label in eqs, f"{nb.name}: link to {label}, which no equation has"
        assert num == eqs[label][1], f"{nb.name}: {label} is eq. ({eqs[label][1]}) in the book, the link says ({num})"
