"""A chapter runs and renders in JupyterLab, driven by headless Chromium."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from normlimits.core import glued
from test_site import CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = os.environ.get("NORMLIMITS_LAB_CHAPTER", "vanishing")


RUN_TIMEOUT_S = 1800


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def copy_book(target: Path) -> Path:
    """A copy of the book's sources (the lab may write to what it opens: never the checkout)."""
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "book", target / "book", ignore=shutil.ignore_patterns("_mathjax", "*.ipynb", ".ipynb_checkpoints"))
    return target


SURVEY_JS = r"""
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets;
  const inside = (node, root) => {
    for (let el = node.parentElement; el && el !== root; el = el.parentElement) {
      if (['CODE', 'PRE', 'SCRIPT', 'STYLE'].includes(el.tagName)) return true;
      if (el.classList.contains('katex') || el.classList.contains('katex-display')) return true;
    }
    return false;
  };
  return cells.map((cell, index) => {
    const model = cell.model;
    const out = {index, type: model.type, source: model.sharedModel.getSource()};
    if (model.type === 'code') {
      out.executionCount = model.executionCount;
      out.errors = model.outputs.toJSON().filter(o => o.output_type === 'error')
                     .map(o => `${o.ename}: ${o.evalue}`);
    } else if (model.type === 'markdown') {
      out.expressions = model.getMetadata('user_expressions') || [];
      const rendered = cell.node.querySelector('.jp-MarkdownOutput, .jp-RenderedMarkdown, .myst');
      out.rendered = !!rendered;
      const texts = [];
      if (rendered) {
        const walker = document.createTreeWalker(rendered, NodeFilter.SHOW_TEXT);
        while (walker.nextNode()) if (!inside(walker.currentNode, rendered)) texts.push(walker.currentNode.nodeValue);
      }
      out.text = texts.join('');
      out.math = rendered ? rendered.querySelectorAll('.katex').length : 0;
    }
    return out;
  });
}
"""


SHOWN_JS = r"""
() => jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'markdown').every(cell => {
  const results = cell.model.getMetadata('user_expressions') || [];
  const text = (cell.node.querySelector('.jp-MarkdownOutput, .jp-RenderedMarkdown, .myst') || {innerText: ''}).innerText;
  return results.every(e => !e.result || e.result.status !== 'ok' ||
    text.includes(String((e.result.data || {})['text/plain'] || '').replace(/^'|'$/g, '')));
})
"""


RAW_MYST = re.compile(r"\{prf:|:::|\$|\{glue|\{eval\}|__import__|\{cite\}|\{numref\}|\{admonition\}")


PASTE = 'glued.paste("'


def expression_text(result: dict) -> str | None:
    """The text an evaluated inline expression shows (None for an error)."""
    if result.get("status") != "ok":
        return None
    return str(result.get("data", {}).get("text/plain", ""))


@pytest.fixture
def lab_server(tmp_path):
    """JupyterLab started as ``make lab`` starts it, on a copy of the book; shut down afterwards."""
    (tmp_path / "checkout").mkdir()
    root = copy_book(tmp_path / "checkout")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NORMLIMITS_WINDOWS="2",
               NORMLIMITS_LEDGER_DIR=str(tmp_path / "ledger"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = tmp_path / "lab.log"
    command = [sys.executable, "-m", "normlimits.book.lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
               f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}"]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited with {process.returncode} at start:\n{log.read_text()[-3000:]}",
                            pytrace=False)
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer on {base} within 120 s:\n{log.read_text()[-3000:]}",
                                pytrace=False)
                time.sleep(0.5)
        yield {"base": base, "token": token, "root": root, "log": log, "process": process}
    finally:
        if process.poll() is None:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST"),
                                       timeout=10)
                process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(timeout=30)


@pytest.mark.book
@pytest.mark.browser
def test_a_chapter_runs_and_renders_in_jupyterlab(lab_server, tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Headless Chromium is missing: install Debian's browser with `make browser`.", pytrace=False)
    source = lab_server["root"] / "book" / f"{CHAPTER}.md"
    original = source.read_text()
    url = f"{lab_server['base']}/lab/tree/{CHAPTER}.md?token={lab_server['token']}"
    start = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page_errors: list[str] = []
        page.on("pageerror", lambda exc: page_errors.append(str(exc)))
        page.goto(url, wait_until="load", timeout=120_000)
        page.wait_for_function(
            "() => { const w = window.jupyterapp && jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
            " return k && k.status === 'idle' && w.content && w.content.widgets.length > 0; }",
            timeout=180_000)
        opened = page.evaluate("() => jupyterapp.shell.currentWidget.context.path")
        assert opened == f"{CHAPTER}.md", f"the lab opened {opened!r}"
        page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
        # done when every code cell has run (or one errored: Run All stops there) and the kernel is idle
        page.wait_for_function(
            "() => { const w = jupyterapp.shell.currentWidget;"
            " const code = w.content.widgets.filter(c => c.model.type === 'code');"
            " const errored = code.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));"
            " const done = code.every(c => c.model.executionCount !== null);"
            " return (errored || done) && w.sessionContext.session.kernel.status === 'idle'; }",
            timeout=RUN_TIMEOUT_S * 1000, polling=2000)
        # then until every evaluated expression is on the page (the Markdown cells re-render after
        # their results arrive); on time-out the checks below say what is missing
        try:
            page.wait_for_function(SHOWN_JS, timeout=180_000, polling=1000)
        except Exception:  # playwright's TimeoutError: reported by the checks
            pass
        cells = page.evaluate(SURVEY_JS)
        report = ROOT / "_build" / "lab"
        report.mkdir(parents=True, exist_ok=True)
        (report / f"{CHAPTER}.json").write_text(json.dumps(cells, indent=1))
        page.screenshot(path=str(report / f"{CHAPTER}.png"), full_page=False)
        page.evaluate("() => jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !jupyterapp.shell.currentWidget.context.model.dirty", timeout=60_000)
        browser.close()
    seconds = time.perf_counter() - start
    print(f"{CHAPTER}: opened, run and checked in JupyterLab in {seconds:.0f} s")

    code = [c for c in cells if c["type"] == "code"]
    markdown = [c for c in cells if c["type"] == "markdown"]
    assert code and markdown, f"{CHAPTER}: the lab shows {len(code)} code and {len(markdown)} Markdown cells"
    errors = [f"cell {c['index']}: {e}" for c in code for e in c["errors"]]
    assert not errors, f"{CHAPTER}: cells errored in JupyterLab:\n  " + "\n  ".join(errors)
    not_run = [c["index"] for c in code if c["executionCount"] is None]
    assert not not_run, f"{CHAPTER}: cells did not run: {not_run}"

    problems = []
    expected = shown = 0
    for cell in markdown:
        where = f"cell {cell['index']} ({cell['source'][:50]!r})"
        if not cell["rendered"]:
            problems.append(f"{where}: not rendered")
            continue
        raw = RAW_MYST.findall(cell["text"])
        if raw:
            problems.append(f"{where}: raw MyST in the rendered text {sorted(set(raw))}: {cell['text'][:200]!r}")
        if "$" in cell["source"] and not cell["math"]:
            problems.append(f"{where}: has $math$ but no typeset formula")
        wanted = cell["source"].count(PASTE)
        expected += wanted
        if not wanted:
            continue
        results = [expression_text(e.get("result", {})) for e in cell["expressions"] if PASTE in e.get("expression", "")]
        values = [r for r in results if r not in (None, "", glued.PENDING, repr(glued.PENDING))]
        shown += len(values)
        if len(values) != wanted:
            problems.append(f"{where}: {wanted} glued values, {len(values)} shown (results: {results[:6]})")
        for value in values:
            if value.strip("'") not in cell["text"]:
                problems.append(f"{where}: glued value {value!r} evaluated but not on the page")
    assert expected > 0, f"{CHAPTER} has no glued value in its prose: pick a chapter that glues"
    assert not problems, f"{CHAPTER} in JupyterLab ({shown}/{expected} glued values shown):\n  " + "\n  ".join(problems[:40])
    assert not [e for e in page_errors if "jupyterlab-myst" in e.lower()], page_errors

    # saved as the book's source: every cell's text and metadata as before (glue roles back, no
    # stored expression results); jupytext may re-format the YAML of the front matter and of cell
    # options, which is its own writing style, not a change
    import jupytext

    saved, before = jupytext.reads(source.read_text(), fmt="md:myst"), jupytext.reads(original, fmt="md:myst")
    assert [(c.cell_type, c.source, dict(c.metadata)) for c in saved.cells] == \
        [(c.cell_type, c.source, dict(c.metadata)) for c in before.cells], "saving from JupyterLab changed the chapter"
