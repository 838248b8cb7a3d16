"""The shape docs/architecture.md promises: imports go down the layers only, and no cycles.

Every import counts: at the top of a module, lazy ones inside functions, and those under `if TYPE_CHECKING:` (a
type-only import is still a dependency a reader has to follow, and the one that hid the compare <-> gate cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

PACKAGE = REPO / "rfteval"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The rfteval modules a module imports anywhere in its body, `if TYPE_CHECKING:` blocks included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    out = set()
    for module in found:
        while module and module not in known:
            module = module.rpartition(".")[0]
        if module and module != name and module != "rfteval":
            out.add(module)
    return out


# The layers, lowest first. A module may import from its own package and from any package of a lower layer;
# never from a higher layer, nor from another package of its own layer. docs/architecture.md draws this list.
LAYERS: list[tuple[str, ...]] = [
    ("rfteval", "rfteval.errors", "rfteval.status", "rfteval.limits", "rfteval.typos"),
    ("rfteval.data",),
    ("rfteval.stats",),
    ("rfteval.providers",),
    ("rfteval.sandbox",),
    ("rfteval.graders", "rfteval.tools"),
    ("rfteval.compare", "rfteval.readiness"),
    ("rfteval.run", "rfteval.reward", "rfteval.baseline_readiness"),
    ("rfteval.report",),
    ("rfteval.view",),
    ("rfteval.cli",),
    ("rfteval.__main__",),
]


def package_of(module: str, layers: list[tuple[str, ...]]) -> tuple[str, int]:
    """The longest layer entry a module falls under, and that entry's layer."""
    best, rank = "", -1
    for i, entries in enumerate(layers):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > len(best):
                best, rank = entry, i
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and to docs/architecture.md)")
    return best, rank


def violations(graph: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """Each import that goes up the layers or sideways into another package of the same layer."""
    out = []
    for module in sorted(graph):
        package, rank = package_of(module, layers)
        for target in sorted(graph[module]):
            target_package, target_rank = package_of(target, layers)
            if target_package != package and target_rank >= rank:
                out.append(f"{module} (layer {rank}) imports {target} (layer {target_rank})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_finds_an_upward_import():
    layers = [("p.low",), ("p.mid", "p.side"), ("p.high",)]
    assert violations({"p.low.a": set(), "p.mid.b": {"p.low.a"}, "p.high": {"p.mid.b", "p.low.a"}}, layers) == []
    assert violations({"p.low.a": {"p.mid.b"}, "p.mid.b": set()}, layers) == ["p.low.a (layer 0) imports p.mid.b (layer 1)"]
    assert violations({"p.mid.b": {"p.side.c"}, "p.side.c": set()}, layers) == ["p.mid.b (layer 1) imports p.side.c (layer 1)"]


def test_the_checker_reads_typing_only_and_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from rfteval.cli.app import app\n"
                      "def f():\n    import rfteval.run.runner\n", encoding="utf-8")
    known = modules()
    found = imports(source, "rfteval.data.m", known)
    assert found == {"rfteval.cli.app", "rfteval.run.runner"}
    assert len(violations({"rfteval.data.m": found, **{m: set() for m in found}}, LAYERS)) == 2


def test_imports_go_down_the_layers():
    known = modules()
    graph = {name: imports(path, name, known) for name, path in known.items()}
    assert violations(graph, LAYERS) == []


def diagram_order(text: str) -> list[str]:
    """The packages docs/architecture.md's layer diagram names, top to bottom (the first words of each line)."""
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    names = []
    for line in block.splitlines():
        if not line or line[0] in " \u2502":
            continue
        for word in line.split("  ")[0].split():
            names.append("rfteval." + word.removesuffix("/").removesuffix(".py"))
    return names


def test_the_diagram_draws_the_layers():
    drawn = diagram_order((PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8"))
    declared = [entry for entries in LAYERS for entry in entries if entry != "rfteval"]
    assert sorted(drawn) == sorted(declared)
    ranks = [package_of(name, LAYERS)[1] for name in drawn]
    assert ranks == sorted(ranks, reverse=True), "the diagram lists the layers from the top (cli) down"


def test_no_import_cycles():
    known = modules()
    graph = {name: imports(path, name, known) for name, path in known.items()}
    assert cycles(graph) == []


# Issue 20 item 5: a command parses its options into a typed request and calls one library function, so its body
# stays short; a command over this is doing library work (or rendering) that belongs below it.
MAX_COMMAND_BODY = 40


def command_bodies(path: Path) -> dict[str, int]:
    """Each `@command(...)` function of a module and its body's length in lines, the docstring left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "command" for d in node.decorator_list):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        out[f"{path.stem}.{node.name}"] = (node.end_lineno or 0) - body[0].lineno + 1 if body else 0
    return out


def long_commands(paths: list[Path], limit: int) -> dict[str, int]:
    return {name: n for path in paths for name, n in command_bodies(path).items() if n > limit}


def test_the_checker_measures_a_command_body(tmp_path):
    source = tmp_path / "x_cmd.py"
    lines = "\n".join(f"    a{i} = {i}" for i in range(41))
    source.write_text(f'@command("x")\ndef x():\n    """Doc\n    string."""\n{lines}\n\n'
                      f'def helper():\n{lines}\n', encoding="utf-8")
    assert command_bodies(source) == {"x_cmd.x": 41}
    assert long_commands([source], MAX_COMMAND_BODY) == {"x_cmd.x": 41}
    assert long_commands([source], 41) == {}


def test_commands_are_thin():
    paths = sorted((PACKAGE / "cli" / "commands").glob("*.py"))
    found = long_commands(paths, MAX_COMMAND_BODY)
    assert sum(len(command_bodies(p)) for p in paths) >= 10, "the checker found no commands: has @command changed?"
    assert found == {}, f"command bodies over {MAX_COMMAND_BODY} lines: move the work into the library"


def rich_imports(path: Path) -> list[str]:
    """The rich modules a module imports anywhere, lazily and under TYPE_CHECKING too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n == "rich" or n.startswith("rich.")]


def test_the_checker_finds_a_rich_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from rich.table import Table\n    import rich\n", encoding="utf-8")
    assert rich_imports(source) == ["rich.table", "rich"]


def test_only_report_renders():
    """Rendering (here: importing rich, its consoles and tables) lives in report/; the rest hands it data."""
    report = PACKAGE / "report"
    found = {str(path.relative_to(PACKAGE)): rich_imports(path) for path in sorted(PACKAGE.rglob("*.py"))
             if report not in path.parents}
    assert {path: names for path, names in found.items() if names} == {}
