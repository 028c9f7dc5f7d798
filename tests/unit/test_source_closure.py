"""The sources a computation runs (normlimits.core.source_closure): what a long-lived cache entry
is keyed by, instead of every source of the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from normlimits.core import source_closure as S


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


TOY = {
    "pkg/__init__.py": "",
    "pkg/a.py": "def f():\n    from pkg.b import g   # inside a function: still run\n    return g()\n",
    "pkg/b.py": "from . import c\n\ndef g():\n    return c.X\n",
    "pkg/c.py": "X = 1\n",
    "pkg/unrelated.py": "import pkg.c\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/e.py": "import json\n",
    "pkg/sub/registry.py": "import importlib\n\ndef load(name):\n    return importlib.import_module(f'pkg.sub.{name}')\n",
    "pkg/uses_registry.py": "from pkg.sub import registry\n",
}


def test_the_closure_follows_imports_anywhere_and_the_packages_on_the_way(tmp_path):
    package = write(tmp_path, TOY)
    assert S.source_closure("pkg.a", package) == ["pkg", "pkg.a", "pkg.b", "pkg.c"]
    assert S.source_closure("pkg.c", package) == ["pkg", "pkg.c"]
    # a module importing by a run-time name depends on every module of its own package
    assert S.source_closure("pkg.uses_registry", package) == [
        "pkg", "pkg.sub", "pkg.sub.e", "pkg.sub.registry", "pkg.uses_registry"]
    with pytest.raises(ValueError, match="'pkg.missing' is not a module"):
        S.source_closure("pkg.missing", package)


def test_the_digest_changes_with_the_closure_only(tmp_path):
    package = write(tmp_path, TOY)
    before = S.closure_digest("pkg.a", package)
    (package / "unrelated.py").write_text("import pkg.c\nY = 2\n")          # outside a's closure
    (package / "sub" / "e.py").write_text("import os\n")
    assert S.closure_digest("pkg.a", package) == before
    (package / "c.py").write_text("X = 2\n")                                 # imported through b
    changed = S.closure_digest("pkg.a", package)
    assert changed != before
    (package / "__init__.py").write_text("# the package itself\n")           # runs on any import
    assert S.closure_digest("pkg.a", package) != changed


def test_the_round_trip_study_is_keyed_by_the_code_it_runs_not_the_book():
    """The stand-in chapter's cached 4-bit round trip survives an edit of the book's Sphinx
    extensions or of a chapter's helper, not one of the metrics or the model loading it runs."""
    closure = set(S.source_closure("normlimits.audit.quant_roundtrip"))
    assert {"normlimits.audit.quant_roundtrip", "normlimits.core.cache", "normlimits.model.gguf",
            "normlimits.metrics.distances", "normlimits.core.source_closure"} <= closure
    assert "normlimits.claims.vanishing" in closure          # loaded by name in claims/__init__
    assert not any(m.startswith(("normlimits.book", "normlimits.dev")) for m in closure)
