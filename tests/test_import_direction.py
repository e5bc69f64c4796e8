"""The import direction of the layers runs one way only (docs/architecture.md):

    sandbox  <-  core  <-  actors  <-  cluster  <-  driver (the orchestrator)
                          ^
                          +---- tiny_recipe (the embedded tiny model's recipe: a client of the layers, which none
                                imports; driver/ loads its hooks by dotted path, driver/models/hooks.py)

`core/` (config schema, chat formatting, records, `algo/`) imports no other layer of this repository; `actors/`
never import the orchestrator (`driver/`), `cluster/` nor the recipe; `cluster/` never imports `driver/` nor the
recipe; `driver/` never imports the recipe; `sandbox/` imports nothing else from the repository. Checked
statically: every .py file is parsed with `ast` (nothing is imported
or executed), and every import counts, at module level or inside a function (lazy imports included), and
`importlib.import_module("...")` with a literal name too. A failure lists each offending `file:line`.
"""
from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("core", "actors", "cluster", "driver", "sandbox", "tiny_recipe")

#: layer -> the top-level packages of this repository it must not import
FORBIDDEN = {
    "core": {"actors", "driver", "cluster", "sandbox", "tiny_recipe"},
    "actors": {"driver", "cluster", "tiny_recipe"},
    "cluster": {"driver", "tiny_recipe"},
    "driver": {"tiny_recipe"},
    "sandbox": {"core", "actors", "driver", "cluster", "tiny_recipe"},
    "tiny_recipe": {"cluster"},
}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parse(path: Path) -> ast.Module:
    """`ast.parse` of the file with the garbage collector paused. Run after the vLLM engine tests in the same process,
    CPython 3.11.7's tree conversion once failed with "SystemError: AST constructor recursion depth mismatch"; a
    finalizer running Python code during the conversion is the likely cause, and with the collector paused none runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), filename=str(path))
    finally:
        if enabled:
            gc.enable()


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file at `path`, in line order; relative imports
    resolved against the file's package (its dotted path under `root`)."""
    tree = parse(path)
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) == "import_module")):
            found.append((node.lineno, node.args[0].value))
    return sorted(found)


def violations(layer: str, forbidden: set, root: Path = ROOT) -> list[str]:
    """'file:line: imports MODULE' for each import in `root/layer/` of a package in `forbidden`."""
    out = []
    for path in sorted((root / layer).rglob("*.py")):
        for line, name in imported_modules(path, root):
            if name.split(".")[0] in forbidden:
                out.append(f"{path.relative_to(root)}:{line}: imports {name}")
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_lower_layers(layer):
    assert (ROOT / layer).is_dir() and any((ROOT / layer).rglob("*.py")), f"layer {layer}/ is missing"
    bad = violations(layer, FORBIDDEN[layer])
    if bad:
        pytest.fail(f"{layer}/ must not import {sorted(FORBIDDEN[layer])} (docs/architecture.md):\n  "
                    + "\n  ".join(bad), pytrace=False)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The parser itself: imports inside functions, relative imports and import_module all count."""
    pkg = tmp_path / "actors"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("import os\n\ndef f():\n    from driver.run import Run\n"
                              "    from . import sibling\n    import importlib\n"
                              "    importlib.import_module('cluster.placement')\n")
    assert imported_modules(pkg / "m.py", tmp_path) == [(1, "os"), (4, "driver.run"), (5, "actors"),
                                                        (6, "importlib"), (7, "cluster.placement")]
    assert violations("actors", {"driver", "cluster"}, tmp_path) == [
        "actors/m.py:4: imports driver.run", "actors/m.py:7: imports cluster.placement"]


PACKAGES = (*LAYERS, "benchmarks")


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of this repository it imports (every import, lazy ones included; `from pkg import
    name` counts as importing `pkg.name` where that is a module of its own, else `pkg`)."""
    files = {_module_name(p, root): p for pkg in PACKAGES if (root / pkg).is_dir() for p in (root / pkg).rglob("*.py")}
    graph = {}
    for module, path in files.items():
        targets = set()
        tree = parse(path)
        from_names = {(n.lineno, n.module, a.name) for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom) and not n.level for a in n.names}
        for line, name in imported_modules(path, root):
            candidates = [f"{name}.{a}" for l, m, a in from_names if l == line and m == name] or [name]
            for candidate in candidates:
                while candidate and candidate not in files:
                    candidate = candidate.rpartition(".")[0]
                if candidate and candidate != module:
                    targets.add(candidate)
        graph[module] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a circle (strongly connected components of more than one
    module; Tarjan's algorithm), each sorted, in sorted order."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_no_import_circles():
    circles = import_circles(module_graph())
    assert not circles, "modules that import each other in a circle (move what both need into a third module):\n  " \
        + "\n  ".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_of_three_and_ignores_a_chain():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_module_graph_resolves_from_imports_of_modules_and_names(tmp_path):
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "x.py").write_text("from driver import y\nfrom driver.y import thing\n")
    (tmp_path / "driver" / "y.py").write_text("def f():\n    from driver.x import g\n")
    graph = module_graph(tmp_path)
    assert graph["driver.x"] == {"driver.y"} and graph["driver.y"] == {"driver.x"}
    assert import_circles(graph) == [["driver.x", "driver.y"]]


#: modules of the embedded tiny recipe that no actor may import: the learner and the rollout engines serve any model,
#: and a model's own needs reach them through small hooks (frozen entries handed to the learner, a response form handed
#: to the rollout workers, extra rows a step)
RECIPE_MODULES = ("tiny_recipe", "driver.models")


def test_actors_import_nothing_of_the_tiny_recipe():
    bad = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
           for path in sorted((ROOT / "actors").rglob("*.py")) for line, name in imported_modules(path)
           if name.startswith(RECIPE_MODULES)]
    assert not bad, "actors/ must not import the tiny recipe:\n  " + "\n  ".join(bad)


DOC = ROOT / "docs" / "architecture.md"
TABLE_START, TABLE_END = ("<!-- layer imports: generated from FORBIDDEN in tests/test_import_direction.py -->",
                          "<!-- end -->")


def layer_imports_table() -> str:
    """The markdown table of what each layer may import of this repository, from FORBIDDEN (a layer it does not list
    imports every other layer)."""
    rows = ["| layer | may import, of this repository |", "|---|---|"]
    for layer in LAYERS:
        allowed = [f"`{other}/`" for other in LAYERS if other != layer and other not in FORBIDDEN.get(layer, set())]
        rows.append(f"| `{layer}/` | {', '.join(allowed) or 'nothing'} |")
    return "\n".join(rows)


def test_the_architecture_doc_shows_the_import_table_the_checks_enforce():
    """docs/architecture.md's table of layer imports is the one FORBIDDEN gives; on a change, paste the table this
    test prints between the markers."""
    text = DOC.read_text()
    assert TABLE_START in text and TABLE_END in text.split(TABLE_START, 1)[1], f"{DOC} lacks the table's markers"
    shown = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    want = layer_imports_table()
    assert shown == want, f"docs/architecture.md's layer table differs from FORBIDDEN; it should read:\n{want}"
