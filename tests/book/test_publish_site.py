"""The book built with repository.url set: its launch and source links, read in Chromium."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY, book_copy
import yaml

from normlimits.book import colab
from normlimits.book.pages import is_notebook, toc_files

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.book
@pytest.mark.browser
def test_site_with_a_repository_shows_working_launch_and_source_links(built_book, tmp_path):
    """Build the book again with ``repository.url`` set, reusing the execution cache of the build
    ``make book`` just made (nothing re-executes), and read every button of two pages in Chromium
    (the first chapter of the table of contents and the first page that is not a notebook)."""
    from playwright.sync_api import sync_playwright

    from test_site import CHROMIUM_ARGS, VIEWPORT, online_button_problems, online_buttons

    site = book_copy(tmp_path, REPOSITORY)
    config = yaml.safe_load((site / "_config.yml").read_text())
    config["execute"]["cache"] = str(built_book / ".jupyter_cache")
    (site / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (site / "_build").mkdir()
    (site / "_build" / "ledger").symlink_to(built_book / "ledger")
    result = subprocess.run([str(BIN / "jupyter-book"), "build", str(site), "--builder", "html", "-W", "-n",
                             "--keep-going"], capture_output=True, text=True, cwd=site)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"the build with repository.url set failed:\n{log[-5000:]}"
    assert "Executing notebook" not in log, "chapters re-executed: the execution cache of make book was not reused"

    notebooks = tmp_path / "colab"
    colab.write_notebooks(site, notebooks)
    html = site / "_build" / "html"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "run `make browser`"
    toc = [ROOT / f"{name}.md" for name in toc_files(yaml.safe_load((site / "_toc.yml").read_text()))]
    chapter = next(path for path in toc if is_notebook(path))
    plain = next(path for path in toc if path.is_file() and not is_notebook(path))
    pages = {f"{path.relative_to(ROOT).with_suffix('.html').as_posix()}": path for path in (chapter, plain)}
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
        for rel, source in pages.items():
            page.goto((html / rel).as_uri(), wait_until="load")
            buttons = page.eval_on_selector_all(".article-header-buttons a[href], .header-article-items a[href]",
                                                "els => els.map(a => a.getAttribute('href'))")
            problems += online_button_problems(rel, buttons, source, REPOSITORY)
            wanted = online_buttons(rel, REPOSITORY)
            # the links lead somewhere that exists in the repository (as published)
            assert (ROOT / source.relative_to(ROOT)).is_file()
            if is_notebook(source):
                colab_path = wanted["colab"].split("/blob/colab/")[1]
                assert (notebooks / colab_path).is_file(), f"the Colab button opens {colab_path}, which make colab does not write"
                binder_path = wanted["binder"].split("urlpath=lab/tree/")[1]
                assert (ROOT / binder_path).is_file() and (ROOT / "binder" / "postBuild").is_file()
        browser.close()
    assert not problems, "\n".join(problems)
