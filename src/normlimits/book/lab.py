"""``make lab``: JupyterLab on the book, chapters opened as notebooks and rendered as MyST.

``python -m normlimits.book.lab [JUPYTER LAB OPTIONS]`` configures the environment it runs in, then
starts ``jupyter lab book`` with the options given (``--configure-only`` stops after configuring;
Binder's ``postBuild`` uses that):

* JupyterLab's settings overrides (``share/jupyter/lab/settings/overrides.json``): ``.md`` files
  open with the "Jupytext Notebook" viewer (a double click runs the chapter's cells, not a text
  editor); every cell is rendered (no windowing: the whole chapter is searchable); no news prompt.
  Other overrides in the file are kept.
* jupyter_server's configuration (``etc/jupyter/jupyter_server_config.json``, other keys kept):
  the contents manager :class:`normlimits.book.lab_contents.BookContentsManager`, which shows the
  chapters' ``{glue:text}`` roles to jupyterlab-myst as inline expressions, so the glued numbers
  appear in the prose once the chapter has run (the ``.md`` on disk keeps the glue roles).

jupyterlab-myst (a pinned requirement) renders the Markdown cells: headings, math, admonitions,
``prf`` theorems and proofs, labels and same-page references. As root (containers, CI) the server
is started with ``--allow-root``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

VIEWERS = {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
#: settings overrides, plugin id -> settings (merged into what the file already has)
OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": VIEWERS},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}
CONTENTS_MANAGER = "normlimits.book.lab_contents.BookContentsManager"
BOOK_FOLDER = "book"


def overrides_path(prefix: Path | None = None) -> Path:
    """JupyterLab's settings overrides file of the environment at ``prefix`` (default: this one)."""
    return Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def server_config_path(prefix: Path | None = None) -> Path:
    """jupyter_server's configuration file of the environment at ``prefix``."""
    return Path(prefix or sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.json"


def write_overrides(prefix: Path | None = None) -> Path:
    """Merge :data:`OVERRIDES` into the environment's settings overrides; keeps other settings."""
    path = overrides_path(prefix)
    settings = json.loads(path.read_text()) if path.is_file() else {}
    for plugin, values in OVERRIDES.items():
        current = settings.setdefault(plugin, {})
        for key, value in values.items():
            if isinstance(value, dict):
                current.setdefault(key, {}).update(value)
            else:
                current[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def write_server_config(prefix: Path | None = None) -> Path:
    """Make the environment's Jupyter server use :data:`CONTENTS_MANAGER`; keeps other settings."""
    path = server_config_path(prefix)
    config = json.loads(path.read_text()) if path.is_file() else {}
    config.setdefault("ServerApp", {})["contents_manager_class"] = CONTENTS_MANAGER
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def configure(prefix: Path | None = None) -> list[Path]:
    """Write both configuration files; returns their paths."""
    return [write_overrides(prefix), write_server_config(prefix)]


def lab_command(options: list[str]) -> list[str]:
    """The ``jupyter lab`` command line ``make lab`` runs, with extra ``options``."""
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter) if jupyter.is_file() else (shutil.which("jupyter") or "jupyter"), "lab"]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in options:
        command.append("--allow-root")
    if not any(not option.startswith("-") for option in options):
        command.append(BOOK_FOLDER)
    return command + options


def main(argv: list[str]) -> int:
    configure_only = "--configure-only" in argv
    options = [a for a in argv if a != "--configure-only"]
    paths = configure()
    print("JupyterLab: chapters (.md) open as notebooks rendered by jupyterlab-myst; glued numbers "
          f"appear once a chapter has run ({', '.join(map(str, paths))})", flush=True)
    if configure_only:
        return 0
    command = lab_command(options)
    os.execv(command[0], command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
