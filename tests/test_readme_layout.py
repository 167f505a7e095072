"""README.md's module table (between ``<!-- BEGIN:LAYOUT -->`` and ``<!-- END:LAYOUT -->``)
against the tree, read at test time.

How a row names paths:
- first column: backticked paths from the repository root (``tostnp/nn/tssa.py``, a folder ends
  in ``/``); a bare name after the first (``tssa_causal.py``) is in the first path's folder;
- second column of a row: a backticked bare name ending in ``.py`` or ``/`` (``oracle.py``,
  ``instructor/``) is in the row's folder (the first path if it is a folder, else its folder),
  and so is any other bare name that is an entry of that folder (``run``, ``book.yml``);
  ``NN`` stands for two digits and ``<word>`` for a name (``exNN_<notebook>.py``); a backticked
  name with a ``/`` in the second column (``book/02_coding_rate.md``) is a reference: it must
  exist but lists nothing.

Checked: every path named exists (a pattern matches at least one file); every module of
``tostnp/`` (every ``.py`` but a sub-package's ``__init__.py``) and every entry of ``.ci/``,
``benchmarks/`` and ``.github/workflows/`` is listed by exactly one row.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = re.compile(r"`([^`\s]+)`")
SKIP = {"__pycache__"}
FOLDERS = (".ci", "benchmarks", ".github/workflows")   # every entry listed; every name there exists


def layout_rows(root=ROOT):
    text = (root / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN:LAYOUT -->", 1)[1].split("<!-- END:LAYOUT -->", 1)[0]
    rows = []
    for line in block.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((line, TOKEN.findall(cells[0]), TOKEN.findall(" | ".join(cells[1:]))))
    return rows


def _matches(folder: Path, name: str):
    """The entries of ``folder`` that ``name`` (maybe a pattern) names."""
    if "NN" not in name and "<" not in name:
        p = folder / name.rstrip("/")
        return [p] if p.exists() else []
    rx = re.escape(name.rstrip("/")).replace("NN", r"\d\d")
    rx = re.sub(r"<[^>]*>", r"\\w+", rx.replace(r"\<", "<").replace(r"\>", ">"))
    return [p for p in folder.iterdir() if re.fullmatch(rx, p.name)] if folder.is_dir() else []


def listed(root=ROOT):
    """(path -> the rows that list it, [missing names])."""
    seen, missing = {}, []
    for line, first, second in layout_rows(root):
        assert first, f"README layout row names no path: {line[:80]}"
        head = root / first[0].rstrip("/")
        base = head.parent
        folder = head if first[0].endswith("/") else head.parent
        paths = set()
        for i, name in enumerate(first):
            hits = _matches(root if "/" in name.rstrip("/") or i == 0 else base, name)
            if not hits:
                missing.append(f"{name} (row {first[0]})")
            paths.update(hits)
        for name in second:
            if name.startswith(("http", "..")):
                continue
            if not name.endswith((".py", "/")):
                # another name (`run`, `book.yml`) lists the entry of the row's folder it names
                if "/" not in name and (folder / name).exists():
                    paths.add(folder / name)
                elif folder in [root / f for f in FOLDERS]:
                    missing.append(f"{name} (row {first[0]}: not in {folder.relative_to(root)})")
                continue
            if "/" in name.rstrip("/"):
                if not ((root / name).exists() or (root / "tostnp" / name).exists()):
                    missing.append(f"{name} (referenced in row {first[0]})")
                continue
            hits = _matches(folder, name)
            if not hits:
                missing.append(f"{name} (row {first[0]}: not in {folder.relative_to(root)})")
            paths.update(hits)
        for p in paths:
            seen.setdefault(p.resolve(), []).append(first[0])
    return seen, missing


def must_list(root=ROOT):
    out = [p for p in (root / "tostnp").rglob("*.py")
           if not SKIP & set(p.parts) and not (p.name == "__init__.py" and p.parent.name != "tostnp")]
    for folder in FOLDERS:
        if (root / folder).is_dir():
            out += [p for p in (root / folder).iterdir() if p.name not in SKIP]
    return out


def problems(root=ROOT):
    seen, missing = listed(root)
    out = [f"missing: {m}" for m in missing]
    for p in must_list(root):
        rows = seen.get(p.resolve(), [])
        if len(rows) != 1:
            what = "not listed" if not rows else f"listed {len(rows)} times (rows {', '.join(rows)})"
            out.append(f"{p.relative_to(root)}: {what}")
    return out


def test_the_readme_table_matches_the_tree():
    found = problems()
    assert not found, ("README's layout table against the tree (a new module: add its file name "
                       "to the row of its folder; a moved one: fix its row):\n" + "\n".join(found))
    assert len(layout_rows()) >= 20


def test_the_check_sees_a_missing_a_doubled_and_a_stale_path(tmp_path):
    for rel in ("tostnp/__init__.py", "tostnp/nn/__init__.py", "tostnp/nn/tssa.py",
                "tostnp/nn/block.py", "tostnp/ex/ex01_a.py", "tostnp/ex/ex02_b.py",
                "tostnp/ex/_core.py", "benchmarks/peer.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    table = ["<!-- BEGIN:LAYOUT -->", "| path | what |", "|---|---|",
             "| `tostnp/__init__.py` | the face |",
             "| `tostnp/nn/tssa.py`, `block.py` | layers |",
             "| `tostnp/ex/` | `exNN_<name>.py` checkers, `_core.py` |",
             "| `benchmarks/` | `peer.py` |", "<!-- END:LAYOUT -->"]
    (tmp_path / "README.md").write_text("\n".join(table))
    assert problems(tmp_path) == []
    (tmp_path / "tostnp/nn/mixers.py").write_text("")                        # a new module
    table[4] = "| `tostnp/nn/tssa.py`, `block.py`, `gone.py` | layers |"      # a stale path
    table[5] = "| `tostnp/ex/` | `exNN_<name>.py` checkers, `_core.py`, `ex01_a.py` |"  # twice in a row
    table.insert(6, "| `tostnp/ex/_core.py` | again |")                        # and in another
    (tmp_path / "README.md").write_text("\n".join(table))
    found = problems(tmp_path)
    assert any("gone.py" in f for f in found), found
    assert any(f.startswith("tostnp/nn/mixers.py: not listed") for f in found), found
    assert any(f.startswith("tostnp/ex/_core.py: listed 2 times") for f in found), found
    assert not any(f.startswith("tostnp/ex/ex01_a.py") for f in found), found
