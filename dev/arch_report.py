"""Architecture figures for reviews: largest files and functions, import cycles.

    python dev/arch_report.py [--top N]

Counts non-blank lines. Functions are found by indentation (def/cdef/cpdef
in .py and .pyx), so it reads Cython too. Imports are every `import` and
`from ... import` of a fluxon_video module anywhere in a file (lazy and
TYPE_CHECKING imports included: a circle through them is still a circle).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fluxon_video"
DEF = re.compile(r"^(\s*)(?:async\s+)?(?:c?p?def|cdef\s+class|class)\s+(?:[\w\s\*\[\],]*?\s)?\*?(\w+)\s*[\(:]")
IMPORT = re.compile(r"^\s*(?:from\s+(fluxon_video[\w.]*)\s+c?import\s+([\w, ()*]+)|c?import\s+(fluxon_video[\w.]*))")


def sources() -> list[Path]:
    """Our source files (not the .c files Cython generates from a .pyx)."""
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".pyx", ".pxd", ".c", ".h")
                  and not (p.suffix == ".c" and p.with_suffix(".pyx").exists()))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def functions(path: Path) -> list[tuple[int, str]]:
    """(non-blank lines, qualified name) of every def in a .py/.pyx file."""
    lines = path.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        m = DEF.match(line)
        if not m or line.rstrip().endswith(("nogil", "except -1")) and "(" not in line:
            continue
        indent = len(m.group(1))
        if line.lstrip().startswith("class") or "cdef class" in line:
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
                                  or lines[j].lstrip().startswith(")")):
            j += 1
        body = [x for x in lines[i:j] if x.strip()]
        found.append((len(body), f"{path.relative_to(ROOT)}:{i + 1} {m.group(2)}"))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in sources() if p.suffix in (".py", ".pyx", ".pxd")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for line in path.read_text().splitlines():
            m = IMPORT.match(line)
            if not m:
                continue
            target = m.group(1) or m.group(3)
            names = [n.strip(" ()") for n in (m.group(2) or "").split(",")]
            for name in names or [""]:
                full = f"{target}.{name}" if name and f"{target}.{name}" in modules else target
                if full in modules and full != mod:
                    graph[mod].add(full)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="rows per table (default: %(default)s)")
    args = parser.parse_args()
    files = sorted(((sum(1 for x in p.read_text().splitlines() if x.strip()), str(p.relative_to(ROOT)))
                    for p in sources()), reverse=True)
    print("largest files (non-blank lines):")
    for n, name in files[:args.top]:
        print(f"  {n:5d}  {name}")
    funcs = sorted((f for p in sources() if p.suffix in (".py", ".pyx") for f in functions(p)),
                   reverse=True)
    print("largest functions (non-blank lines):")
    for n, name in funcs[:args.top]:
        print(f"  {n:5d}  {name}")
    found = cycles(import_graph())
    print("import cycles:", "none" if not found else "")
    for comp in found:
        print("  " + " <-> ".join(comp))


if __name__ == "__main__":
    main()
