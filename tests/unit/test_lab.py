"""``make lab``: JupyterLab opens chapters as notebooks rendered as MyST, glued numbers included.

The unit tests check the configuration ``python -m normlimits.book.lab`` writes and the translation of
glue roles (:mod:`normlimits.book.lab_contents`, :mod:`normlimits.core.glued`). The browser test does what a
reader does: it starts JupyterLab exactly as ``make lab`` does (``python -m normlimits.book.lab``) on a
copy of the book and a free local port, opens one chapter in headless Chromium (Debian's
``chromium``, driven by Playwright), runs all cells on the stand-in, and checks the rendered page:
no raw MyST (``{prf:``, ``:::``, ``$``, glue roles) in the Markdown cells, every glued number of the
chapter shown, no cell errored. It then saves the notebook and checks that the chapter's source
came back unchanged, and shuts the server down. What the lab showed is kept in ``_build/lab/``
(the cells as JSON, a screenshot).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normlimits.core import glued
from normlimits.book import lab, lab_contents

ROOT = Path(__file__).resolve().parents[2]
#: the chapter the browser test runs (the quickest on the stand-in); NORMLIMITS_LAB_CHAPTER overrides


# --- configuration ---------------------------------------------------------------------------

def test_overrides_open_markdown_as_notebooks_and_keep_other_settings(tmp_path):
    path = lab.write_overrides(tmp_path)
    path.write_text(json.dumps({"other": {"x": 1},
                                "@jupyterlab/docmanager-extension:plugin": {"autosave": False}}))
    lab.write_overrides(tmp_path)
    settings = json.loads(path.read_text())
    assert settings["other"] == {"x": 1}
    docmanager = settings["@jupyterlab/docmanager-extension:plugin"]
    assert docmanager["defaultViewers"] == lab.VIEWERS and docmanager["autosave"] is False
    assert settings["@jupyterlab/notebook-extension:tracker"]["windowingMode"] == "none"


def test_server_config_sets_the_contents_manager_and_keeps_other_settings(tmp_path):
    path = lab.server_config_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ServerApp": {"port": 9999}, "Other": {"a": 1}}))
    lab.write_server_config(tmp_path)
    config = json.loads(path.read_text())
    assert config["ServerApp"] == {"port": 9999, "contents_manager_class": lab.CONTENTS_MANAGER}
    assert config["Other"] == {"a": 1}


def test_the_configured_contents_manager_imports_and_is_jupytexts():
    from jupyter_server.utils import import_item
    from jupytext import AsyncTextFileContentsManager

    assert issubclass(import_item(lab.CONTENTS_MANAGER), AsyncTextFileContentsManager)


def test_lab_command_opens_the_book_folder_and_passes_options():
    command = lab.lab_command(["--no-browser"])
    assert command[1] == "lab" and lab.BOOK_FOLDER in command and command[-1] == "--no-browser"
    assert lab.BOOK_FOLDER not in lab.lab_command(["other"])


# --- glue roles as kernel expressions ------------------------------------------------------------

def test_glue_roles_become_expressions_and_come_back_unchanged():
    text = "a {glue:text}`x:.2f` b {glue:text}`y` c {glue:text}`other.md::z:.1f` {glue:figure} d"
    lab_text = lab_contents.glue_to_eval(text)
    assert '{eval}`__import__("normlimits.core.glued").core.glued.paste("x:.2f")`' in lab_text
    assert '{eval}`__import__("normlimits.core.glued").core.glued.paste("y")`' in lab_text
    assert "{glue:text}`other.md::z:.1f`" in lab_text, "a cross-page role cannot be evaluated"
    assert lab_contents.eval_to_glue(lab_text) == text


def test_roles_inside_a_glue_directive_stay_roles_and_those_around_it_become_expressions():
    text = ("before {glue:text}`a`\n\n```{glue:figure} fig\n:name: f\n\ncaption {glue:text}`b:.2f`\n```\n\n"
            "::::{glue:figure} other\n{glue:text}`c`\n::::\n\nafter {glue:text}`d`\n")
    lab_text = lab_contents.glue_to_eval(text)
    assert 'paste("a")' in lab_text and 'paste("d")' in lab_text
    assert "caption {glue:text}`b:.2f`" in lab_text and "\n{glue:text}`c`\n" in lab_text
    assert lab_contents.eval_to_glue(lab_text) == text


@pytest.mark.parametrize("source", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_every_page_survives_the_round_trip(source):
    text = source.read_text()
    assert lab_contents.eval_to_glue(lab_contents.glue_to_eval(text)) == text


def test_notebook_translation_drops_stored_expression_results():
    notebook = {"cells": [{"cell_type": "markdown", "source": ["v {glue:text}`k:.1f`"],
                           "metadata": {lab_contents.EXPRESSIONS_METADATA: [{"expression": "..."}]}},
                          {"cell_type": "code", "source": "glue('k', 1.0)", "metadata": {}}]}
    lab_contents.for_lab(notebook)
    assert "{eval}" in notebook["cells"][0]["source"]
    lab_contents.for_disk(notebook)
    assert notebook["cells"][0] == {"cell_type": "markdown", "source": "v {glue:text}`k:.1f`", "metadata": {}}
    assert notebook["cells"][1]["source"] == "glue('k', 1.0)"


def test_paste_formats_as_myst_nb_and_says_when_a_value_is_not_glued_yet(monkeypatch):
    monkeypatch.setattr(glued, "VALUES", {})
    message = {"content": {"data": {"application/papermill.record/text/plain": "0.123456"},
                           "metadata": {"scrapbook": {"name": "k", "mime_prefix": "application/papermill.record/"}}}}
    assert glued.record(message) is message
    assert glued.paste("k:.2f") == "0.12" and glued.paste("k") == "0.123456"
    assert glued.paste("k:.1%") == "12.3%"
    assert glued.paste("missing:.2f") == glued.PENDING
    glued.record({"content": {"data": {"text/plain": "'a word'"},
                              "metadata": {"scrapbook": {"name": "w", "mime_prefix": ""}}}})
    assert glued.paste("w") == "a word"
    assert repr_pretty(glued.paste("w")) == "a word", "the kernel shows the text, not a quoted string"


def repr_pretty(value) -> str:
    from IPython.lib.pretty import pretty

    return pretty(value)


def test_install_outside_a_kernel_does_nothing():
    assert glued.install() is False


# --- the lab in a browser --------------------------------------------------------------------


# What the lab shows once the chapter ran, read from JupyterLab's own notebook model and the DOM.

# True once every Markdown cell that has evaluated expressions shows each result's text.

