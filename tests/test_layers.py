"""The package's layers: which part may import which, and no import circles.

Read from the source (every ``import`` statement, at module level or inside a function),
so a wrong-way import fails here, in CI, before anyone runs it. The allowed directions are
the user guide's (docs/guide/layout.md): the numpy layers (``core``, ``data``, ``algorithms``) import no
other part of ppt_dask above them and load no dask or bokeh.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ppt_dask

PACKAGE = Path(ppt_dask.__file__).resolve().parent

# subpackage -> the parts of ppt_dask it may import (itself always)
ALLOWED = {
    "progress": set(),
    "core": set(),
    "nets": {"core"},
    "data": {"core", "progress"},
    "algorithms": {"core"},
    "observe": {"core"},
    "engine": {"core", "nets", "data", "algorithms", "progress"},
    "api": {"core", "observe", "engine"},
    "perf": {"core", "data", "algorithms", "observe", "engine", "api"},
    "sklearn": {"core", "nets", "data", "algorithms", "observe", "engine", "api", "progress"},
    "deploy": {"core", "observe", "engine"},
    "cli": {"core", "nets", "data", "algorithms", "observe", "engine", "api", "perf", "sklearn", "deploy", "progress"},
    "testing": set(),
    "versions": set(),
}
NUMPY_ONLY = ("core", "data", "algorithms")
# Inside the engine: how the loops talk (wire/) lies below what a round does (rounds/) and
# where data and workers are (placement/); it may import only these of ppt_dask besides itself.
WIRE = "ppt_dask.engine.wire"
WIRE_MAY_IMPORT = ("ppt_dask.core", "ppt_dask.engine.waits")
HEAVY = ("dask", "distributed", "bokeh")
TORCH_ONLY = ("nets",)  # the PyTorch adapter: the only part that imports torch


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parse(path: Path, tries: int = 3):
    """``ast.parse``, again when CPython 3.11 raises "AST constructor recursion depth mismatch":
    another thread parsing at the same moment can trip it (python/cpython#106905; 3.11's
    tracebacks parse their source lines, and the suite's in-process schedulers log some).
    Seen once in a fresh clone's run of the suite."""
    for attempt in range(tries):
        try:
            return ast.parse(path.read_text(), str(path))
        except SystemError:
            if attempt == tries - 1:
                raise


def imports_of(path: Path, known=frozenset()) -> set[str]:
    """The modules a file imports, absolute and dotted (relative imports resolved).

    ``from pkg import module`` imports ``pkg.module``; it counts as importing ``pkg`` itself
    only when it also takes a name that is not one of the ``known`` modules."""
    tree = _parse(path)
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = {f"{base}.{alias.name}" for alias in node.names}
            found.update(names & known if known else names)
            if not known or names - known:
                found.add(base)
    return found


def modules() -> dict[str, set[str]]:
    """Every module of the package -> the ppt_dask modules it imports (the front excluded:
    it only re-exports, lazily)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        if name == "ppt_dask":
            continue
        graph[name] = {m for m in imports_of(path, frozenset(files)) if m in files and m not in ("ppt_dask", name)}
    return graph


def part(module: str) -> str:
    """``ppt_dask.core.network`` -> ``core``; a top-level module is its own part."""
    return module.split(".")[1]


def test_the_check_reads_the_imports_it_judges():
    """The reader sees a known import of each kind: absolute, inside a function, from a package."""
    graph = modules()
    assert "ppt_dask.core.validation" in graph["ppt_dask.core.tree"]
    assert "ppt_dask.algorithms.strategies" in graph["ppt_dask.algorithms.localsgd"]
    assert "ppt_dask.engine.saving.modelfile" in graph["ppt_dask.engine.result"]  # imported inside Result.save()
    assert "ppt_dask.data.datasets" in graph["ppt_dask.cli.commands"]  # from ppt_dask.data import datasets


def wire_imports_from_above() -> list[str]:
    """The imports of wire/ that reach above it (rounds/, placement/, the head's loop ...)."""
    return sorted(f"{name} imports {target}" for name, targets in modules().items()
                  if name == WIRE or name.startswith(WIRE + ".") for target in targets
                  if not (target == WIRE or target.startswith(WIRE + ".") or target.startswith(WIRE_MAY_IMPORT)))


def test_the_wire_lies_below_the_rounds():
    """The loops' transport (engine/wire/) imports nothing of rounds/ or placement/; they import it."""
    assert wire_imports_from_above() == [], f"engine/wire/ may import only {WIRE_MAY_IMPORT} besides itself"
    graph = modules()
    assert "ppt_dask.engine.wire.mailbox" in graph["ppt_dask.engine.rounds.stream"]  # the check sees rounds/ use it
    assert "ppt_dask.engine.wire.sharedmem" in graph["ppt_dask.engine.placement.shards"]


def test_the_wire_check_can_fail(monkeypatch):
    """The same check finds an import of rounds/ planted in wire/."""
    graph = modules()
    graph["ppt_dask.engine.wire.links"] = {*graph["ppt_dask.engine.wire.links"], "ppt_dask.engine.rounds.stream"}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: graph)
    with pytest.raises(AssertionError, match="ppt_dask.engine.wire.links imports ppt_dask.engine.rounds.stream"):
        test_the_wire_lies_below_the_rounds()


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_what_lies_below_it(layer):
    wrong = sorted(f"{name} imports {target}" for name, targets in modules().items()
                   if part(name) == layer for target in targets
                   if part(target) != layer and part(target) not in ALLOWED[layer])
    assert wrong == [], f"{layer} may import only {sorted(ALLOWED[layer]) or 'nothing else of ppt_dask'}"


def test_no_import_circles():
    """Tarjan's strongly connected components of the import graph: each must be one module."""
    graph = modules()
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_circle_check_can_fail(monkeypatch):
    """The same check finds a circle planted in the graph it reads."""
    graph = modules()
    graph["ppt_dask.core.validation"] = {*graph["ppt_dask.core.validation"], "ppt_dask.core.tree"}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: graph)
    with pytest.raises(AssertionError, match="ppt_dask.core.tree"):
        test_no_import_circles()


def test_the_numpy_layers_load_no_dask_or_bokeh():
    """Importing every module of the numpy layers (in a fresh interpreter) loads none of them."""
    names = sorted(m for m in modules() if part(m) in NUMPY_ONLY)
    code = (f"import sys\nimport {', '.join(names)}\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"{run.stdout.strip()} loaded by {names}"


def test_the_engine_loads_no_diagnostics():
    """Importing every module of the engine (in a fresh interpreter) loads nothing of observe/:
    the engine calls the recorder it is given (``ppt_dask.api`` gives the collector's)."""
    names = sorted(m for m in modules() if part(m) == "engine")
    code = (f"import sys\nimport {', '.join(names)}\n"
            "print(sorted(m for m in sys.modules if m.startswith('ppt_dask.observe')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"{run.stdout.strip()} loaded by the engine"


def test_the_command_line_parser_loads_no_dask():
    """``ppt-dask --version`` and ``--help`` build the whole parser, cluster commands
    included: that loads no dask (the cluster commands import it when they run)."""
    code = ("import sys\nfrom ppt_dask.cli.commands import build_parser\n"
            "build_parser().format_help()\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
    version = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "--version"], capture_output=True, text=True,
                             timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("ppt-dask ")


def test_the_front_loads_nothing_until_asked():
    """``import ppt_dask`` is cheap; a name is imported the first time it is used."""
    code = ("import sys, ppt_dask as ppt\n"
            "before = 'distributed' in sys.modules\n"
            "ppt.MLP\n"
            "middle = 'distributed' in sys.modules\n"
            "ppt.train\n"
            "print(before, middle, 'distributed' in sys.modules, set(ppt.__all__) <= set(dir(ppt)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False", "True", "True"]


def test_the_direction_check_can_fail(monkeypatch):
    """The same check finds a wrong-way import planted in the graph it reads."""
    graph = modules()
    graph["ppt_dask.core.network"] = {*graph["ppt_dask.core.network"], "ppt_dask.engine.trainer"}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: graph)
    with pytest.raises(AssertionError, match="ppt_dask.core.network imports ppt_dask.engine.trainer"):
        test_a_layer_imports_only_what_lies_below_it("core")


def test_only_the_adapter_imports_torch():
    """torch is an optional extra: only ppt_dask.nets (TorchNet) names it, and importing every
    other module of the package (in a fresh interpreter) loads no torch."""
    named = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if any(m == "torch" or m.startswith("torch.") for m in imports_of(p))
                   and part(module_name(p)) not in TORCH_ONLY)
    assert named == [], f"{named} import torch; only {TORCH_ONLY} may"
    names = sorted(m for m in modules() if part(m) not in TORCH_ONLY and not m.endswith("__main__"))
    code = (f"import sys\nimport {', '.join(names)}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"{run.stdout.strip()[:200]} loaded by the package outside {TORCH_ONLY}"
    assert "ppt_dask.nets.torchnet" in modules() and any(
        m == "torch" for m in imports_of(PACKAGE / "nets" / "torchnet.py"))  # the check sees the adapter's import
