"""The house rules (docs/dev/architecture.md): at most three modules of ppt_dask/ over 400
lines, each saying in its docstring why it stays whole, no function over 60 code lines (its
docstring, comments and blank lines not counted), and the layers' picture drawn from the code.
Read from the source with ``ast``, so the rules hold for every change."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ppt_dask

PACKAGE = Path(ppt_dask.__file__).resolve().parent
MODULE_LINES = 400
MAX_LONG_MODULES = 3
FUNCTION_CODE_LINES = 60
WHOLE = "stays whole"  # the words a long module's docstring uses to say why


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str, func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of ``func``'s body that hold code: not blank, not only a comment, not a docstring
    (its own or a nested definition's)."""
    text = source.splitlines()
    docs = _docstring_lines(func)
    start = func.body[0].lineno
    return sum(1 for n in range(start, func.end_lineno + 1)
               if n not in docs and text[n - 1].strip() and not text[n - 1].strip().startswith("#"))


def functions() -> dict[str, int]:
    """``path:name`` (a method as ``path:Class.name``) -> its code lines, for every function of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        tree = ast.parse(source, str(path))
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        item.qualified = f"{node.name}.{item.name}"  # type: ignore[attr-defined]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = getattr(node, "qualified", node.name)
                found[f"{where}:{name}"] = max(found.get(f"{where}:{name}", 0), code_lines(source, node))
    return found


def long_modules() -> dict[str, int]:
    return {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}


def test_the_count_reads_code_lines_only():
    """A hand-counted function: a docstring, a comment and a blank line do not count, a nested
    function's code does."""
    source = ('def f(x):\n    """Doc\n    string."""\n    # why\n    y = x\n\n    def g():\n'
              '        """Its doc."""\n        return y\n    return (g,\n            y)\n')
    func = ast.parse(source).body[0]
    assert code_lines(source, func) == 5  # y = x; def g(); return y; return (g,; y)


def test_no_function_over_sixty_code_lines():
    long = {name: n for name, n in functions().items() if n > FUNCTION_CODE_LINES}
    assert long == {}, f"split these by steps (over {FUNCTION_CODE_LINES} code lines): {long}"


def test_at_most_three_long_modules_each_saying_why():
    long = long_modules()
    assert len(long) <= MAX_LONG_MODULES, f"over {MODULE_LINES} lines: {long}; split by concept"
    silent = [name for name in long if WHOLE not in " ".join(
        (ast.get_docstring(ast.parse((PACKAGE / name).read_text())) or "").split())]
    assert silent == [], f"{silent}: say in the docstring why the module {WHOLE}"


def test_the_layers_picture_is_the_codes():
    """docs/_static/layers.svg (docs/dev/architecture.md) is what docs/layers.py draws from the
    imports now."""
    script = PACKAGE.parent / "docs" / "layers.py"
    run = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"the picture is not the code's: python docs/layers.py ({run.stderr[-500:]})"
