"""Draw the package's layers and the imports between them: docs/_static/layers.svg.

    python docs/layers.py            # writes docs/_static/layers.svg
    python docs/layers.py --check    # exits 1 when the picture is not the code's

The arrows are read from the code (every ``import``, as tests/test_layers.py reads them),
between the parts placed below; an arrow that others already imply (a -> b -> c makes
a -> c) is left out, so the picture shows each layer on the ones right under it; an arrow that
passes a box goes behind it. No graphviz: plain SVG, so the docs build offline.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ppt_dask"
OUT = ROOT / "docs" / "_static" / "layers.svg"

# part -> (column, floor, width in columns, its modules in words); floor 0 is the ground
PARTS = {
    "cli": (1, 9, 5, "the ppt-dask command"),
    "perf": (0, 8, 2, "the run-time model, measured"),
    "sklearn": (2, 8, 2, "PPTClassifier, PPTRegressor"),
    "deploy": (4, 8, 2, "ssh, Slurm"),
    "api": (1, 7, 7, "ppt.train with the collector"),
    "engine/head": (0, 6, 6, "engine/: trainer, roundloop, checks, result, history"),
    "engine/rounds": (0, 5, 6, "engine/rounds/: what a round does, the loops"),
    "engine/placement": (0, 4, 6, "engine/placement/: where data and workers are"),
    "engine/wire": (0, 3, 6, "engine/wire/: how the loops talk (links, shared memory, mailbox)"),
    "engine/ground": (0, 2, 6, "engine/: waits, loopenv, interrupt, saving/"),
    "nets": (2, 1, 2, "TorchNet"),
    "algorithms": (4, 1, 2, "strategies (numpy)"),
    "data": (0, 1, 2, "data sets, tables (numpy)"),
    "observe": (6, 6, 2, "collector, breakdown, page"),
    "core": (0, 0, 8, "core/: the network, losses, optimizers, the tree (numpy only)"),
}
FLOORS = 1 + max(floor for _, floor, _, _ in PARTS.values())
GROUND = {"waits", "loopenv", "interrupt", "saving"}
SMALL = {"progress", "versions", "testing"}  # small modules of their own, not drawn
W, H, GAP = 120, 46, 26  # a column's width, a floor's height, the space between floors


def part(module: str) -> str | None:
    p = module.split(".")
    if len(p) < 2 or p[1] in SMALL or p[1].startswith("_"):
        return None
    if p[1] != "engine":
        return p[1]
    if len(p) > 2 and p[2] in ("rounds", "placement", "wire"):
        return f"engine/{p[2]}"
    return "engine/ground" if len(p) > 2 and p[2] in GROUND else "engine/head"


def imports() -> set[tuple[str, str]]:
    """(part, part it imports), read from every module's import statements."""
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                a, b = part(name), part(t) if t.startswith("ppt_dask.") else None
                if a and b and a != b:
                    edges.add((a, b))
    return edges


def reduced(edges: set) -> set:
    """Without the arrows that a longer path already gives."""
    def reach(a, skip):
        seen, todo = set(), [b for (x, b) in edges if x == a and (x, b) != skip]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += [b for (x, b) in edges if x == n]
        return seen
    return {(a, b) for (a, b) in edges if b not in reach(a, (a, b))}


def box(name: str) -> tuple[float, float, float, float]:
    col, floor, width, _ = PARTS[name]
    top = (FLOORS - 1 - floor) * (H + GAP) + 10
    return col * W + 10, top, width * W - 10, H


def svg(edges: set) -> str:
    unknown = {p for e in edges for p in e} - set(PARTS)
    if unknown:
        raise SystemExit(f"parts not placed in the picture: {sorted(unknown)}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{8 * W + 10}" height="{FLOORS * (H + GAP) + 10}" '
           'font-family="sans-serif" font-size="11">',
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>']
    for a, b in sorted(edges):
        ax, ay, aw, ah = box(a)
        bx, by, bw, bh = box(b)
        lo, hi = max(ax, bx), min(ax + aw, bx + bw)  # straight down where the boxes overlap
        x1, x2 = ((lo + hi) / 2,) * 2 if lo < hi else (ax + aw / 2, bx + bw / 2)
        y1, y2 = (ay + ah, by) if ay < by else (ay, by + bh)
        out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#555" '
                   'marker-end="url(#a)"/>')
    for name in PARTS:
        x, y, w, h = box(name)
        fill = "#e8f0fb" if name.startswith("engine/") else "#f4f4f4"
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="5" fill="{fill}" fill-opacity="0.9" '
                   'stroke="#888"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + 18}" text-anchor="middle" font-weight="bold">{name}</text>')
        out.append(f'<text x="{x + w / 2}" y="{y + 34}" text-anchor="middle">{PARTS[name][3]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    picture = svg(reduced(imports()))
    if "--check" in argv:
        return 0 if OUT.exists() and OUT.read_text() == picture else 1
    OUT.write_text(picture)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
