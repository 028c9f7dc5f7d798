"""Keep the book's execution cache honest: drop it when anything the chapters compute from changes.

Jupyter Book's ``execute_notebooks: cache`` re-executes a chapter only when the chapter's own
source changes. The chapters' numbers also depend on the settings (``NORMLIMITS_*``, whether the
hub is reachable), on the package's code (``src/normlimits``, which includes the stand-in's
recipe) and on the corpus text, none of which that cache sees: after a change to any of them it
would serve the old outputs. ``make book`` therefore calls :func:`refresh` first, which fingerprints
those inputs and, when the fingerprint differs from the one stored in the build folder, drops
the execution cache together with Sphinx's saved environment (``.doctrees``: without that, Sphinx
would not even re-read an unchanged chapter, so nothing would re-execute), the chapters'
ledger rows (rewritten as the chapters execute) and the forward passes the chapters share
(``captures``, :mod:`normlimits.model.capture_cache`).

Run as ``python -m normlimits.book.execution_cache [BUILD_DIR]`` (default ``_build``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

from normlimits.core.cache import package_digest

#: environment variables that change what the chapters compute
SETTING_PREFIXES = ("NORMLIMITS_",)
SETTING_NAMES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
#: settings that only say where something is kept, not what is computed
SETTINGS_IGNORED = ("NORMLIMITS_CAPTURE_CACHE",)
DEFAULT_BUILD = Path("_build")
#: what is dropped, relative to the build folder: the execution cache, Sphinx's environment and
#: doctrees, the chapters' ledger rows, the shared capture cache (normlimits.model.capture_cache)
DERIVED = (".jupyter_cache", ".doctrees", "ledger", "captures")
FINGERPRINT_FILE = "normlimits-inputs.json"


def _corpus_digest(setting: str | None) -> str | None:
    """sha256 of a local corpus file (None for the default download or a URL: those are pinned by
    the corpus module's own checks, and reading them here would need the network)."""
    if not setting:
        return None
    path = Path(setting).expanduser()
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def inputs(environ: dict[str, str] | None = None, package_root: Path | None = None) -> dict:
    """What the executed chapters depend on beyond their own source, as a JSON-able dict."""
    env = os.environ if environ is None else environ
    settings = {k: v for k, v in sorted(env.items())
                if (k.startswith(SETTING_PREFIXES) or k in SETTING_NAMES) and k not in SETTINGS_IGNORED}
    return {
        "settings": settings,
        "package": package_digest(package_root),
        "corpus_file": _corpus_digest(settings.get("NORMLIMITS_CORPUS")),
        "torch": metadata.version("torch").split("+")[0],   # without importing torch
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def refresh(build_dir: Path | str = DEFAULT_BUILD, current: dict | None = None) -> str | None:
    """Drop the :data:`DERIVED` folders of ``build_dir`` if the stored fingerprint differs from
    ``current`` (default :func:`inputs`); store the new one. Returns a sentence saying why they
    were dropped, or None if they were kept (or there was nothing yet)."""
    build_dir = Path(build_dir)
    current = inputs() if current is None else current
    stamp = build_dir / FINGERPRINT_FILE
    previous = None
    if stamp.is_file():
        try:
            previous = json.loads(stamp.read_text())
        except (OSError, ValueError):
            previous = None
    present = [build_dir / name for name in DERIVED if (build_dir / name).exists()]
    reason = None
    if present and previous != current:
        if previous is None:
            changed = ["no record of the inputs"]
        else:
            changed = [k for k in sorted(set(previous) | set(current))
                       if previous.get(k) != current.get(k)]
        reason = ("the chapters' inputs changed (" + ", ".join(changed) + "): every chapter "
                  "re-executes")
        for path in present:
            shutil.rmtree(path)
    build_dir.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=1, sort_keys=True))
    tmp.replace(stamp)
    return reason


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    build_dir = Path(args[0]) if args else DEFAULT_BUILD
    reason = refresh(build_dir)
    if reason:
        print(f"{build_dir}: executed chapters dropped, {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
