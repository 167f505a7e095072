"""The package's import graph, read from the code (ast): no cycle, and no import that runs back up
the floors of the pipeline

    backend -> math -> nn -> models -> data, io -> train -> analysis, bench, experiments,
    exercises -> cli

(a module may import from its own floor and the floors before it). Every import counts, also
those inside functions. The package's face (``tostnp/__init__.py``) and ``__main__`` stand
outside the floors; nothing inside may import them.
"""
import ast
import os

import tostnp

ROOT = os.path.dirname(tostnp.__file__)
FLOORS = {"backend": 0, "math": 1, "nn": 2, "models": 3, "data": 4, "io": 4, "train": 5,
          "analysis": 6, "bench": 6, "experiments": 6, "exercises": 6, "cli": 7}


def _modules() -> dict:
    """{dotted module name: path} of every .py file of the package."""
    out = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), os.path.dirname(ROOT))[:-3]
                parts = rel.split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = os.path.join(d, f)
    return out


def import_graph() -> dict:
    """{module: set of tostnp modules it imports} (a package import names its __init__)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        package = name if is_pkg else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module
                # "from pkg import sub" imports the submodule pkg.sub when there is one
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                           for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:           # "import tostnp.nn.layers as L" etc.
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t.startswith("tostnp") and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def floor(module: str):
    parts = module.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def cycles(graph) -> list:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_floor():
    outside = {m for m in import_graph() if floor(m) is None}
    assert outside == {"tostnp", "tostnp.__main__", "tostnp._startup"}, outside


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_no_import_runs_back_up_the_floors():
    graph = import_graph()
    up = sorted((m, d) for m, deps in graph.items() for d in deps
                if floor(m) is not None and (floor(d) is None or floor(d) > floor(m)))
    assert up == [], up


def test_the_oracle_shares_no_code_with_what_it_checks():
    assert import_graph()["tostnp.analysis.oracle"] == set()


def test_the_graph_is_read():
    """The reader finds the imports it must (a guard against a test that checks nothing)."""
    g = import_graph()
    assert "tostnp.backend.validate" in g["tostnp.models.lm"]
    assert "tostnp.nn.block" in g["tostnp.models.lm"]
    assert "tostnp.backend.tuning" in g["tostnp.nn.tssa_causal"]
    assert len(g) > 80 and sum(map(len, g.values())) > 200
