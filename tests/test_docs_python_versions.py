"""One supported Python range, stated the same everywhere: every statement of a Python range in
the docs (README, docs/, exercises/, the book, run.py) agrees with pyproject.toml's
requires-python (the lowest) and its classifiers (the highest), and run.py refuses what
pyproject refuses."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V = r"3\.\d+"
# "Python 3.11+", "Python 3.11 or newer", "Python >= 3.11", "Python 3.11 to 3.14",
# "Python 3.11–3.14", "Python 3.11, 3.12, 3.13 or 3.14"
STATEMENT = re.compile(
    rf"Python\s*(?P<ge>>=\s*)?(?P<low>{V})(?P<range>\+|\s+or\s+(?:newer|later|above)"
    rf"|\s*(?:to|–|-)\s*(?P<high>{V})|(?:,\s*{V})*,?\s+(?:and|or)\s+(?P<last>{V}))?")


def version(s):
    return tuple(int(x) for x in s.split("."))


def supported():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    low = re.fullmatch(rf">=\s*({V})", meta["requires-python"].strip()).group(1)
    classified = sorted(version(c.rsplit(":: ", 1)[1]) for c in meta["classifiers"]
                        if re.fullmatch(rf"Programming Language :: Python :: {V}", c))
    assert classified[0] == version(low), "pyproject: requires-python and the classifiers differ"
    return version(low), classified[-1]


def doc_files():
    files = [ROOT / "README.md", ROOT / "run.py"]
    for pattern in ("docs/*.md", "exercises/*.md", "exercises/instructor/*.md", "book/*.md"):
        files += sorted(ROOT.glob(pattern))
    return files


def statements(text):
    """(the statement, lowest, highest or None) for every Python range stated in text."""
    out = []
    for m in STATEMENT.finditer(text):
        if not (m.group("ge") or m.group("range")):
            continue            # one version named ("measured with Python 3.13"), not a range
        high = m.group("high") or m.group("last")
        out.append((m.group(0), version(m.group("low")), version(high) if high else None))
    return out


def test_the_pattern_reads_every_form():
    assert [s[1:] for s in statements(
        "Python 3.10 or newer; Python 3.10+; Python >= 3.11; Python 3.11 to 3.14; "
        "Python 3.11–3.14; Python 3.11, 3.12, 3.13 or 3.14; Python 3.13")] == [
        ((3, 10), None), ((3, 10), None), ((3, 11), None), ((3, 11), (3, 14)),
        ((3, 11), (3, 14)), ((3, 11), (3, 14))]


def test_every_doc_states_the_supported_range():
    low, high = supported()
    wrong, seen = [], 0
    for path in doc_files():
        for text, lo, hi in statements(path.read_text(encoding="utf-8")):
            seen += 1
            if lo != low or (hi is not None and hi != high):
                wrong.append(f"{path.relative_to(ROOT)}: {text!r}")
    assert not wrong, (f"pyproject.toml supports Python {low[0]}.{low[1]} to "
                       f"{high[0]}.{high[1]}; these docs say otherwise:\n" + "\n".join(wrong))
    assert seen >= 4      # README, STUDENT.md, exercises/README.md, the book


def test_the_launcher_refuses_what_pyproject_refuses():
    low, _ = supported()
    src = (ROOT / "run.py").read_text(encoding="utf-8")
    assert re.search(r"MIN_PYTHON = \((\d+), (\d+)\)", src).groups() == tuple(map(str, low))
