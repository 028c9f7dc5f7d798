"""``make lab`` set-up: JupyterLab opens the book's MyST chapters as notebooks (jupytext).

Writes JupyterLab's settings overrides in the virtual environment so that ``.md`` files open with
the "Jupytext Notebook" viewer by default (a double click runs the chapter's cells, not a text
editor). Run as ``python -m normlimits.lab``; it changes nothing outside the environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VIEWERS = {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}


def overrides_path(prefix: Path | None = None) -> Path:
    """JupyterLab's settings overrides file of the environment at ``prefix`` (default: this one)."""
    return Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def write_overrides(prefix: Path | None = None) -> Path:
    """Make Jupytext Notebook the default viewer of Markdown files; keeps other overrides."""
    path = overrides_path(prefix)
    settings = json.loads(path.read_text()) if path.is_file() else {}
    plugin = settings.setdefault("@jupyterlab/docmanager-extension:plugin", {})
    plugin.setdefault("defaultViewers", {}).update(VIEWERS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


if __name__ == "__main__":
    print(f"JupyterLab: chapters (.md) open as notebooks ({write_overrides()})")
