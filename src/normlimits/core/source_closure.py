"""The sources a computation runs: a module and every module of this package it imports.

A result cached in ``NORMLIMITS_CACHE`` outlives the build that computed it, so its key must
change whenever the code that computed it changes. :func:`~normlimits.core.cache.package_digest`
(every source of the package) does that, but also changes with every edit anywhere else (a
chapter's helper, a Sphinx extension), so each clean clone after any commit computed such a
result again. :func:`closure_digest` covers only what the computation can run: the module, every
module of the package it imports (at the top or inside a function, directly or through another),
and the ``__init__`` of every package on the way, found by reading the sources (``ast``), never
by importing them. A module that imports by a name built at run time
(``importlib.import_module``) is taken to depend on every module of its own package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from normlimits.core.cache import sources_digest

__all__ = ["PACKAGE", "module_files", "imported_modules", "source_closure", "closure_digest"]

#: the package's folder (``normlimits``)
PACKAGE = Path(__file__).resolve().parents[1]


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its name, file ``__init__.py``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _dynamic(tree: ast.AST) -> bool:
    """Whether the module calls ``importlib.import_module`` (or ``import_module``) anywhere."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "import_module":
                return True
    return False


def imported_modules(name: str, path: Path, known: set[str], *, by_name: bool = True) -> set[str]:
    """The modules of the package (names in ``known``) that module ``name`` (file ``path``)
    imports anywhere in its file; a name imported from a package that is a module of it counts
    as that module; relative imports are resolved. With ``importlib.import_module`` in the file
    and ``by_name``, every module of the module's own package is included (False: the import
    statements only, as the layering test reads them)."""
    top = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == top}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != top:
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    if by_name and _dynamic(tree):
        found |= {m for m in known if m.startswith(package + ".")}
    return {m for m in found if m != name and m in known}


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` -> ``[a, a.b, a.b.c]``: importing a module runs every package ``__init__`` above it."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@functools.cache
def _graph(package: Path) -> dict[str, frozenset[str]]:
    files = module_files(package)
    known = set(files)
    return {name: frozenset(imported_modules(name, path, known)) for name, path in files.items()}


def source_closure(module: str, package: Path = PACKAGE) -> list[str]:
    """``module`` and every module of ``package`` it can run, sorted by name. ValueError for a
    module that is not in ``package``."""
    graph = _graph(package)
    if module not in graph:
        raise ValueError(f"{module!r} is not a module of {package} (known: e.g. {sorted(graph)[:3]})")
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for name in _with_parents(current):
            if name in graph and name not in seen:
                seen.add(name)
                todo.extend(graph[name])
    return sorted(seen)


def closure_digest(module: str, package: Path = PACKAGE) -> str:
    """sha256 over the paths and contents of :func:`source_closure`'s files, read now (so an edit
    made since the import graph was read still changes it)."""
    files = module_files(package)
    return sources_digest(package, [files[name] for name in source_closure(module, package)])
