"""The planted-faults runner's mechanics (no chapter of the book is run here)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from normlimits.dev import faults as F


def _fault(old="VALUE = 1", new="VALUE = 2", tests=("tests/test_value.py",), chapters=()):
    return F.Fault("value", "a value", "VALUE is 2", (F.Edit("normlimits/__init__.py", old, new),),
                   tuple(tests), tuple(chapters))


@pytest.fixture
def toy_repo(tmp_path):
    """A repository with a one-line package ``normlimits`` and one test of it."""
    root = tmp_path / "repo"
    (root / "src" / "normlimits").mkdir(parents=True)
    (root / "src" / "normlimits" / "__init__.py").write_text("VALUE = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_value.py").write_text(
        "import normlimits\n\ndef test_value():\n    assert normlimits.VALUE == 1\n\n"
        "def test_other():\n    assert True\n")
    return root


# ------------------------------------------------------------------------------- the list
def test_the_repository_list_has_ten_faults_and_every_edit_applies(tmp_path):
    faults = F.load_faults()
    assert len(faults) >= 10
    assert sum(bool(f.chapters) for f in faults) >= len(faults) / 2, "half the faults go through a chapter"
    chapters = {p.stem for p in (F.ROOT / "book").glob("*.md")}
    for fault in faults:
        assert set(fault.chapters) <= chapters, fault.id
        for node in fault.tests:
            assert (F.ROOT / node.split("::")[0]).is_file(), f"{fault.id}: no test file for {node}"
        src = F.copy_package(F.ROOT / "src", tmp_path / fault.id)
        F.apply_edits(fault, src)                      # raises if an anchor moved
        for edit in fault.edits:
            assert edit.new in (src / edit.file).read_text()


def test_a_missing_or_repeated_anchor_is_a_clear_error(toy_repo, tmp_path):
    src = F.copy_package(toy_repo / "src", tmp_path / "a")
    with pytest.raises(F.FaultError, match=r"fault value: .*occurs 0 times in normlimits/__init__.py"):
        F.apply_edits(_fault(old="VALUE = 3"), src)
    (src / "normlimits" / "__init__.py").write_text("VALUE = 1\nVALUE = 1\n")
    with pytest.raises(F.FaultError, match="occurs 2 times"):
        F.apply_edits(_fault(), src)
    with pytest.raises(F.FaultError, match="does not exist"):
        F.apply_edits(F.Fault("x", "i", "w", (F.Edit("normlimits/nope.py", "a", "b"),), ("t",)), src)


def test_edits_apply_in_order_to_the_copy_only(toy_repo, tmp_path):
    src = F.copy_package(toy_repo / "src", tmp_path / "a")
    fault = F.Fault("two", "i", "w", (F.Edit("normlimits/__init__.py", "VALUE = 1", "VALUE = 2"),
                                      F.Edit("normlimits/__init__.py", "VALUE = 2", "VALUE = 3")), ("t",))
    F.apply_edits(fault, src)
    assert (src / "normlimits" / "__init__.py").read_text() == "VALUE = 3\n"
    assert (toy_repo / "src" / "normlimits" / "__init__.py").read_text() == "VALUE = 1\n"


@pytest.mark.parametrize("body, message", [
    ('id = "a"\nissue = "i"\nwhat = "w"\ntests = ["t"]\n', "has no"),
    ('id = "a"\nissue = "i"\nwhat = "w"\n[[fault.edit]]\nfile = "f"\nold = "x"\nnew = "y"\n', "neither tests"),
    ('id = "a"\nissue = "i"\nwhat = "w"\ntests = ["t"]\n[[fault.edit]]\nfile = "f"\nold = "x"\nnew = "x"\n',
     "changes nothing"),
    ('issue = "i"\nwhat = "w"\n', "has no 'id'"),
])
def test_malformed_lists_are_refused(tmp_path, body, message):
    path = tmp_path / "f.toml"
    path.write_text("[[fault]]\n" + body)
    with pytest.raises(F.FaultError, match=message):
        F.load_faults(path)


def test_duplicate_ids_and_empty_lists_are_refused(tmp_path):
    entry = '[[fault]]\nid = "a"\nissue = "i"\nwhat = "w"\ntests = ["t"]\n[[fault.edit]]\nfile = "f"\nold = "x"\nnew = "y"\n'
    path = tmp_path / "f.toml"
    path.write_text(entry + entry)
    with pytest.raises(F.FaultError, match="appears twice"):
        F.load_faults(path)
    path.write_text("")
    with pytest.raises(F.FaultError, match="no \\[\\[fault\\]\\]"):
        F.load_faults(path)


# ------------------------------------------------------------------------------- running
def test_a_fault_is_caught_by_the_test_that_sees_it_and_the_baseline_passes(toy_repo):
    checks = {"tests": ["tests/test_value.py"], "chapters": []}
    base = F.run_fault(None, checks, root=toy_repo)
    assert [c["caught"] for c in base["checks"]] == [False]
    entry = F.run_fault(_fault(), checks, root=toy_repo)
    (check,) = entry["checks"]
    assert check["caught"] is True and check["failed"] == ["tests/test_value.py::test_value"]
    assert F.verdict(entry, F.baseline_failures(base)) == "caught"
    assert "test_value.py::test_value" in F.where_caught(entry, set())
    assert (toy_repo / "src" / "normlimits" / "__init__.py").read_text() == "VALUE = 1\n"


def test_a_fault_no_test_sees_slips_through(toy_repo):
    entry = F.run_fault(_fault(), {"tests": ["tests/test_value.py::test_other"]}, root=toy_repo)
    assert F.verdict(entry, set()) == "SLIPPED" and F.where_caught(entry, set()) == "nothing"


def test_a_missing_test_id_is_an_error_not_a_catch(toy_repo):
    entry = F.run_fault(_fault(), {"tests": ["tests/test_value.py::test_nope"]}, root=toy_repo)
    assert entry["checks"][0]["caught"] is None
    assert F.verdict(entry, set()) == "error"


def test_a_check_failing_at_baseline_does_not_count():
    entry = {"checks": [{"kind": "tests", "target": "t", "caught": True, "failed": ["t::a"], "detail": ""},
                        {"kind": "chapter", "target": "vanishing", "caught": True, "failed": [],
                         "detail": "AssertionError"}]}
    assert F.verdict(entry, {"t::a", "vanishing"}) == "SLIPPED"
    assert F.where_caught(entry, {"t::a", "vanishing"}).count("fails at baseline") == 2
    assert F.verdict(entry, {"t::a"}) == "caught"
    assert F.where_caught(entry, {"t::a"}).endswith("chapter vanishing: AssertionError")


def test_a_fault_with_no_selected_check_is_not_run_and_not_counted():
    entry = {"checks": []}
    assert F.verdict(entry, set()) == "not run"
    report = {"faults": [{"id": "a", "verdict": "not run", "seconds": 0.0, "where": "nothing"}],
              "caught": 0, "total": 0, "seconds": 1.0}
    assert F.format_table(report).endswith("0 of 0 faults caught in 1 s (1 not run: no check selected)")


def test_parse_pytest_reads_the_short_summary():
    out = "x\nFAILED tests/a.py::test_b[1-2] - assert 1 == 2\nERROR tests/c.py::test_d - boom\n1 failed"
    assert F.parse_pytest(out) == ["tests/a.py::test_b[1-2]", "tests/c.py::test_d"]


def test_private_cache_copies_results_and_never_links(tmp_path):
    real = tmp_path / "real"
    (real / "standin" / "abc").mkdir(parents=True)
    (real / "standin" / "abc" / "model.safetensors").write_text("weights")
    (real / "standin" / "abc.lock").write_text("")
    (real / "standin" / ".tmp-123").mkdir()              # a training in progress
    (real / "corpus").mkdir()
    assert F.has_standin(real) and not F.has_standin(tmp_path / "none")
    cache = F.prepare_cache(tmp_path / "run", real)
    assert not (cache / "standin" / ".tmp-123").exists()
    copied = cache / "standin" / "abc" / "model.safetensors"
    assert copied.read_text() == "weights" and not copied.is_symlink() and not (cache / "standin").is_symlink()
    assert not (cache / "standin" / "abc.lock").exists() and not (cache / "corpus").exists()
    env = F.run_environment(tmp_path / "src", cache, tmp_path / "ledger")
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path / "src")
    assert env["NORMLIMITS_CACHE"] == str(cache) and env["NORMLIMITS_CAPTURE_CACHE"] == "off"


def test_a_chapter_whose_cell_raises_is_caught_with_its_message(tmp_path, monkeypatch):
    chapter = tmp_path / "toy.md"
    chapter.write_text(textwrap.dedent("""\
        ---
        jupytext:
          text_representation: {extension: .md, format_name: myst, format_version: 0.13}
        kernelspec: {display_name: Python 3, language: python, name: python3}
        ---
        ```{code-cell} ipython3
        x = 2
        ```
        ```{code-cell} ipython3
        assert x == 1, "x is not one"
        ```
        """))
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path / "ledger"))
    result = F.execute_chapter(chapter)
    assert result["caught"] is True and result["detail"].startswith("AssertionError: x is not one (cell 1")
    chapter.write_text(chapter.read_text().replace("x == 1", "x == 2"))
    assert F.execute_chapter(chapter)["caught"] is False     # a chapter with no registered claims


def test_table_and_json_report(tmp_path):
    report = {"faults": [{"id": "a", "verdict": "caught", "seconds": 3.0, "where": "tests: t"},
                         {"id": "bb", "verdict": "SLIPPED", "seconds": 1.0, "where": "nothing"}],
              "caught": 1, "total": 2, "seconds": 4.0}
    table = F.format_table(report)
    assert "a      caught" in table and "bb     SLIPPED" in table and table.endswith("1 of 2 faults caught in 4 s")
    json.dumps(report)


def test_chapters_without_a_trained_standin_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv("NORMLIMITS_MODEL", raising=False)
    with pytest.raises(F.FaultError, match="make standin"):
        F.main(["--only", "causal-mask-dropped", "--json", str(tmp_path / "r.json")])


def test_unknown_fault_ids_are_refused(capsys):
    with pytest.raises(SystemExit):
        F.main(["--only", "no-such-fault"])
    assert "unknown fault ids" in capsys.readouterr().err
