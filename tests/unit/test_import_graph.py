"""The package's folders are its layers: every import between them runs downwards, and no module
imports itself back through others. Imports inside functions count as much as those at the top."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import normlimits
from normlimits.core.source_closure import imported_modules, module_files

PACKAGE = Path(normlimits.__file__).resolve().parent

#: which layers each layer may import (besides itself); a layer not named here may import none.
ALLOWED = {
    "core": set(),
    "metrics": {"core"},
    "theory": {"core", "metrics"},
    "claims": {"core"},
    "model": {"core", "metrics"},
    "experiments": {"core", "metrics", "theory", "claims", "model"},
    "audit": {"core", "metrics", "theory", "claims", "model", "experiments"},
    "book": {"core", "metrics", "theory", "claims", "model", "experiments", "audit"},
    "dev": {"core", "metrics", "theory", "claims", "model", "experiments", "audit", "book"},
}
#: modules at the package's top: the command line dispatches to any layer's ``main``.
TOP = {"normlimits", "normlimits.__main__"}


def modules() -> dict[str, Path]:
    return module_files(PACKAGE)


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports by its import statements, anywhere in the file."""
    return imported_modules(name, path, known, by_name=False)


@functools.cache
def graph() -> dict[str, frozenset[str]]:
    """Every module of the package -> the package's modules it imports (read once per session)."""
    found = modules()
    return {name: frozenset(imported(name, path, set(found))) for name, path in found.items()}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_the_top_of_the_package_imports_nothing_of_it():
    """``import normlimits`` (which any layer may do, e.g. for the package's folder) loads no layer."""
    assert graph()["normlimits"] == set()


def test_every_module_lives_in_a_layer():
    stray = [m for m in modules() if m not in TOP and layer(m) is None]
    assert stray == [], f"modules outside the layers {sorted(ALLOWED)}: {stray}"


def test_imports_run_downwards():
    upward = []
    for module, targets in graph().items():
        here = layer(module)
        if here is None:
            continue
        for target in targets:
            there = layer(target)
            if there is not None and there != here and there not in ALLOWED[here]:
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports against the layers' order:\n" + "\n".join(sorted(upward))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_circle_and_only_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("source, expected", [
    ("from normlimits.core import cache", {"normlimits.core.cache"}),
    ("from normlimits.core.cache import atomic_write_json", {"normlimits.core.cache"}),
    ("def f():\n    from normlimits.book import chapter\n", {"normlimits.book.chapter"}),
    ("from .settings import CACHE_ENV", {"normlimits.core.settings"}),
    ("from ..claims import ledger", {"normlimits.claims.ledger"}),
    ("import normlimits.model.capture as C", {"normlimits.model.capture"}),
])
def test_imports_are_read_wherever_they_are(tmp_path, source, expected):
    """Top-level, function-local, relative and plain imports are all found (a module ``x`` of
    ``normlimits/core`` written in ``tmp_path``)."""
    path = tmp_path / "normlimits" / "core" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert imported("normlimits.core.x", path, set(modules())) == expected
