"""Re-execution as a reader does it: each chapter, opened with jupytext, runs in a fresh kernel.

Outside the book build: the MyST source is read with jupytext (as JupyterLab does under
``make lab``), executed with nbclient in a new ``python3`` kernel from the chapter's own folder,
with a small window count (``NORMLIMITS_WINDOWS=2``) on the stand-in (``NORMLIMITS_MODEL=standin``)
and without replicas on other models (``NORMLIMITS_REPLICAS=off``) so it stays quick (the strict
book build executes every chapter on the default model, replicas included), and with the claims
ledger sent to a temporary folder (``NORMLIMITS_LEDGER_DIR``) so the book's ledger is not touched.
Every cell must run, every glue key the prose uses must be glued, and the chapter must record each
claim it owes the ledger.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from normlimits import ledger
from normlimits.pages import notebook_pages

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
WINDOWS = "2"
MODEL = "standin"
CELL_TIMEOUT = 1500


def notebook_chapters() -> list[Path]:
    """The book's pages that are notebooks (jupytext front matter with a kernelspec)."""
    return notebook_pages(ROOT)


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
GLUE_DIRECTIVE = re.compile(r"^[`:]{3,}\{glue(?::\w+)?\}\s+(\S+)", re.M)


def glue_keys_used(nb) -> set[str]:
    """Glue keys the chapter's Markdown cells paste (same-document keys only)."""
    keys: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for content in GLUE_ROLE.findall(cell.source):
                if "::" not in content:  # "doc::key" pastes from another page
                    keys.add(content.split(":", 1)[0].strip())
            keys.update(GLUE_DIRECTIVE.findall(cell.source))
    return keys


def glue_keys_made(nb) -> set[str]:
    """Glue keys the executed notebook's outputs carry (myst-nb's ``scrapbook`` metadata)."""
    keys: set[str] = set()
    for cell in nb.cells:
        for output in cell.get("outputs", ()):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                keys.add(name)
    return keys


def test_the_book_has_notebook_chapters():
    names = [p.stem for p in notebook_chapters()]
    assert "setup" in names, f"the setup page is not an executable notebook in the toc: {names}"


@pytest.mark.parametrize("path", notebook_chapters(), ids=lambda p: p.stem)
def test_chapter_executes_in_a_fresh_kernel(path, tmp_path, monkeypatch):
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv(ledger.LEDGER_ENV, str(tmp_path / "ledger"))
    monkeypatch.setenv("NORMLIMITS_WINDOWS", WINDOWS)
    monkeypatch.setenv("NORMLIMITS_MODEL", MODEL)
    monkeypatch.setenv("NORMLIMITS_REPLICAS", "off")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name} failed when executed in a fresh kernel from {path.parent} "
                    f"(NORMLIMITS_WINDOWS={WINDOWS}, NORMLIMITS_MODEL={MODEL}):\n{str(exc)[-4000:]}", pytrace=False)
    seconds = time.perf_counter() - start
    print(f"{path.name}: executed in {seconds:.0f} s")

    missing = glue_keys_used(nb) - glue_keys_made(nb)
    assert not missing, f"{path.name}: the prose pastes glue keys the code never glued: {sorted(missing)}"

    chapter = path.stem
    rows = ledger.read_rows(tmp_path / "ledger" / f"{chapter}.json")
    for row in rows:
        ledger.validate_row(row)
    owed = ledger.missing_claims(rows, [chapter])
    assert not owed, f"{path.name} did not record {owed} in the ledger"
