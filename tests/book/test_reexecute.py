"""Re-execution as a reader does it: each chapter, opened with jupytext, runs in a fresh kernel.

Outside the book build: the MyST source is read with jupytext (as JupyterLab does under
``make lab``), executed with nbclient in a new ``python3`` kernel from the chapter's own folder,
with a small window count (``NORMLIMITS_WINDOWS=2``) on the stand-in (``NORMLIMITS_MODEL=standin``)
and without replicas on other models (``NORMLIMITS_REPLICAS=off``) so it stays quick (the strict
book build executes every chapter on the default model, replicas included), and with the claims
ledger sent to a temporary folder (``NORMLIMITS_LEDGER_DIR``) so the book's ledger is not touched.
Every cell must run, every glue key the prose uses must be glued, and the chapter must record each
claim it owes the ledger. A chapter the build already replayed on the stand-in in a fresh kernel
(its replica, with the same checks, on every window) is not executed a second time here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from normlimits import claims
from normlimits.claims import ledger
from normlimits.book.replicas import glue_keys_made, glue_keys_used
from normlimits.book.pages import notebook_pages

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = "2"
MODEL = "standin"
CELL_TIMEOUT = 1500


def notebook_chapters() -> list[Path]:
    """The book's pages that are notebooks (jupytext front matter with a kernelspec)."""
    return notebook_pages(ROOT)


def replayed_by_the_build(built_book: Path, chapter: str) -> bool:
    """Whether the strict build already executed ``chapter`` on the stand-in in a fresh kernel.

    A model-dependent chapter replays itself on the control models (``book.other_models``:
    jupytext source, new ``python3`` kernel from the chapter's folder, replicas off inside, glue
    keys checked, ledger rows validated and recorded as variants). When the build's primary model
    is not the stand-in, the ledger holds the chapter's rows with ``variant == "standin"``: the
    reader's re-execution on the stand-in has run, on every window, and need not run again here.
    """
    rows = ledger.read_ledger_json(built_book / "ledger.json")
    return any(r["chapter"] == chapter and r.get("variant") == MODEL for r in rows)


def test_the_book_has_notebook_chapters():
    names = [p.stem for p in notebook_chapters()]
    assert "setup" in names, f"the setup page is not an executable notebook in the toc: {names}"


@pytest.mark.parametrize("path", notebook_chapters(), ids=lambda p: p.stem)
def test_chapter_executes_in_a_fresh_kernel(path, tmp_path, monkeypatch, built_book):
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if replayed_by_the_build(built_book, path.stem):
        print(f"{path.name}: executed on {MODEL} in a fresh kernel by the build's replica")
        return
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
    owed = claims.missing_claims(rows, [chapter])
    assert not owed, f"{path.name} did not record {owed} in the ledger"
