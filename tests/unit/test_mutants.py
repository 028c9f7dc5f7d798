"""The mutation-score report (normlimits.dev.mutants) on a small mutmut 3 results folder made here."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from normlimits.dev import mutants

ROOT = Path(__file__).resolve().parents[2]

# What mutmut 3 writes for a module with one function: the original and its mutants side by side.
MUTATED_SOURCE = '''
def x_scale__mutmut_orig(x, t):
    """Scale."""
    y = x / t
    return y + 1

def x_scale__mutmut_1(x, t):
    """Scale."""
    y = x * t
    return y + 1

def x_scale__mutmut_2(x, t):
    """Scale."""
    y = x / t
    return y - 1

def x_scale__mutmut_3(x, t):
    """Scale."""
    y = None
    return y + 1

def x_check__mutmut_orig(n):
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    return n

def x_check__mutmut_1(n):
    if n < 1:
        raise ValueError(None)
    return n

def x_check__mutmut_2(n):
    if n < 1:
        raise ValueError("XXn must be >= 1XX")
    return n

def x_check__mutmut_3(n):
    if n <= 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    return n

class Box:
    def xǁBoxǁsize__mutmut_orig(self):
        return len(self.items)
    def xǁBoxǁsize__mutmut_1(self):
        return None
'''


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "mutants" / "src" / "pkg"
    folder.mkdir(parents=True)
    (folder / "mod.py").write_text(MUTATED_SOURCE)
    codes = {"pkg.mod.x_scale__mutmut_1": 1, "pkg.mod.x_scale__mutmut_2": 0,
             "pkg.mod.x_scale__mutmut_3": -24, "pkg.mod.xǁBoxǁsize__mutmut_1": 33,
             "pkg.mod.x_check__mutmut_1": 0, "pkg.mod.x_check__mutmut_2": 1, "pkg.mod.x_check__mutmut_3": 1}
    (folder / "mod.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    other = tmp_path / "mutants" / "src" / "pkg" / "other.py.meta"
    other.write_text(json.dumps({"exit_code_by_key": {"pkg.other.x_f__mutmut_1": None,
                                                      "pkg.other.x_f__mutmut_2": 1,
                                                      "pkg.other.x_f__mutmut_3": -11}}))
    return tmp_path / "mutants"


def test_statuses_follow_mutmuts_exit_codes():
    assert [mutants.status_of(c) for c in (1, 3, 0, 33, 5, 36, -24, None, 37)] == [
        "killed", "killed", "survived", "no tests", "no tests", "timeout", "timeout", "not run", "killed"]
    assert mutants.status_of(-11) == "suspicious" and mutants.status_of(99) == "suspicious"


def test_names_and_modules_are_split():
    assert mutants.split_name("normlimits.theory.distances.x_bound__mutmut_12") == (
        "normlimits.theory.distances", "x_bound", 12)
    assert mutants.split_name("a.b.xǁSweepResultǁ__getattr____mutmut_3") == ("a.b", "xǁSweepResultǁ__getattr__", 3)
    with pytest.raises(ValueError, match="not a mutmut 3 mutant name"):
        mutants.split_name("a.b.f")
    root = Path("mutants")
    assert mutants.module_of(root / "src" / "normlimits" / "metrics" / "jacobian.py.meta", root) == "normlimits.metrics.jacobian"


def test_changed_lines_are_read_from_the_mutated_source(results):
    found = {m.name: m for m in mutants.read_results(results, equivalent=[])}
    assert (found["pkg.mod.x_scale__mutmut_1"].before, found["pkg.mod.x_scale__mutmut_1"].after) == (
        "y = x / t", "y = x * t")
    assert found["pkg.mod.x_scale__mutmut_2"].after == "return y - 1"
    assert found["pkg.mod.xǁBoxǁsize__mutmut_1"].before == "return len(self.items)"
    # only a change of a raised exception's text is a message mutant
    assert [found[f"pkg.mod.x_check__mutmut_{k}"].message for k in (1, 2, 3)] == [True, True, False]
    assert not any(m.message for m in found.values() if "x_check" not in m.name)
    # a module without its mutated source still reports statuses
    assert found["pkg.other.x_f__mutmut_2"].status == "killed" and found["pkg.other.x_f__mutmut_2"].before == ""


def test_scores_count_timeouts_as_killed_and_leave_out_unrun_and_equivalent(results):
    equivalent = [("pkg.mod", "x_scale", "y = x / t", "y = x * t", "never listed: this one is killed"),
                  ("pkg.mod", "x_scale", "return  y + 1", "return y - 1", "for the test")]
    found = mutants.read_results(results, equivalent=equivalent)
    assert [m.equivalent for m in found if m.module == "pkg.mod"][:4] == ["never listed: this one is killed",
                                                                           "for the test", "", ""]
    table = mutants.scores(found)
    mod, other = table["pkg.mod"], table["pkg.other"]
    # mod: 2 killed, 1 timeout, 1 equivalent (not scored), 1 without tests (scored, not killed),
    # 2 message mutants (not scored; one killed)
    assert (mod.counts["killed"], mod.counts["timeout"], mod.counts["equivalent"], mod.counts["no tests"]) == (2, 1, 1, 1)
    assert (mod.counts["message"], mod.counts["message killed"]) == (2, 1)
    assert mod.score == pytest.approx(3 / 4)
    # other: one not run (left out), one killed, one crash (suspicious, scored, not killed)
    assert other.score == pytest.approx(1 / 2)
    text = mutants.format_table(table)
    assert "75.0%" in text and "50.0%" in text and "1/2" in text
    assert text.splitlines()[-2].startswith("all") and text.splitlines()[-1].startswith("score =")


def test_main_reports_modules_survivors_and_the_goal(results, capsys):
    assert mutants.main(["--root", str(results), "--survivors", "mod"]) == 0
    out = capsys.readouterr().out
    assert "pkg.mod" in out and "pkg.other" not in out
    assert "- return y + 1" in out and "+ return y - 1" in out
    assert mutants.main(["--root", str(results), "--names", "mod"]) == 0
    assert capsys.readouterr().out.split() == ["pkg.mod.x_scale__mutmut_2", "pkg.mod.xǁBoxǁsize__mutmut_1"]
    assert mutants.main(["--root", str(results), "--fail-under", "0.9"]) == 1
    assert mutants.main(["--root", str(results / "nothing")]) == 2
    assert "run `make mutants` first" in capsys.readouterr().err


def test_every_listed_equivalent_mutant_names_a_mutated_module_and_a_reason():
    mutated = {p.removeprefix("src/").removesuffix(".py").replace("/", ".")
               for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]}
    for module, function, before, after, reason in mutants.EQUIVALENT:
        assert module in mutated and function.startswith("x") and before != after and len(reason) > 20


def test_mutmut_is_pinned_and_its_folders_are_ignored():
    make = (ROOT / "Makefile").read_text()
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["mutants"]
    assert "mutmut==3.8.1" in pins and "'3.8.1'" in make and "['mutants']" in make and "\nmutants:" in make
    default = next(line for line in make.splitlines() if line.startswith("MODULES ?="))
    mutated = {p.removeprefix("src/normlimits/").removesuffix(".py").replace("/", ".")
               for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]}
    assert set(default.split("=", 1)[1].split()) == mutated       # a plain `make mutants` runs them all
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "mutants/" in ignored


@pytest.mark.parametrize("before, after, kind", [
    ("x = torch.arange(b, device=dev)[:, None]", "x = torch.arange(b, device=None)[:, None]", "device"),
    ("x = torch.arange(b, device=dev)[:, None]", "x = torch.arange(b, )[:, None]", "device"),
    ("u = u.to(w.device)", "u = u.to(None)", "device"),
    ("u = u.to(w.dtype)", "u = u.to(None)", ""),                          # a dtype is not a device
    ('s = torch.einsum("cl,ld->cd", c, y)', 's = torch.einsum("CL,LD->CD", c, y)', "case"),
    ('t = float("nan")', 't = float("NAN")', "case"),
    ('r["true"] = torch.einsum("bl->b", y)', 'r["TRUE"] = torch.einsum("bl->b", y)', ""),   # a dict key
    ("p = f(w, n, chunk_elements=chunk_elements)", "p = f(w, n, )", "chunk"),
    ("p = f(w, n, chunk_elements=chunk_elements)", "p = f(w, n, chunk_elements=None)", ""),
])
def test_recurring_equivalent_kinds_are_recognised_by_the_change(before, after, kind):
    m = mutants.Mutant(name="a.b.x_f__mutmut_1", module="a.b", function="x_f", status="survived",
                       before=before, after=after)
    assert mutants.equivalence_reason(m, equivalent=[]).split(":")[0] == kind
