"""Every table generated from a committed result equals what docs/gen_tables.py makes of that
result now (a table cannot drift from its JSON), and every relative link of the README and the
docs pages points at a file that exists."""
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gen_tables():
    spec = importlib.util.spec_from_file_location("gen_tables", ROOT / "docs" / "gen_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_generated_table_equals_its_json():
    gen = gen_tables()
    stale, blocks = [], 0
    for rel in gen.PAGES:
        text = (ROOT / rel).read_text(encoding="utf-8")
        names = gen.BLOCK.findall(text)
        assert names, f"{rel}: no generated block"
        blocks += len(names)
        if gen.render(text) != text:
            stale.append(rel)
    assert not stale, f"stale tables in {stale}: run python3 docs/gen_tables.py"
    assert blocks >= len(gen.GENERATORS)


def test_a_changed_figure_is_seen():
    """The check is not vacuous: a figure edited by hand inside a block is rewritten."""
    gen = gen_tables()
    text = (ROOT / "docs" / "context-scaling.md").read_text(encoding="utf-8")
    body = text.split("<!-- BEGIN:GEN context-table -->", 1)[1]
    assert "| 4,096 | 0.650 | 2.145 |" in body           # docs/bench/context_scaling.json
    edited = text.replace("| 4,096 | 0.650 | 2.145 |", "| 4,096 | 0.550 | 2.145 |")
    assert gen.render(edited) == text


def test_every_relative_link_resolves():
    gen = gen_tables()
    broken = []
    for rel in gen.PAGES + ["docs/usage.md", "docs/guarantees.md", "docs/testing.md"]:
        page = ROOT / rel
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{rel}: {target}")
    assert not broken, "broken links: " + "; ".join(broken)
