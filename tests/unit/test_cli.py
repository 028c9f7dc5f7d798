"""``normlimits <command>``: one command line dispatching to every tool's ``main``."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from normlimits import __main__ as cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_names_a_module_with_a_main(command):
    module, what = cli.COMMANDS[command]
    assert callable(importlib.import_module(module).main) and len(what) > 10


def test_help_lists_every_command_with_what_it_does(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command, (_, what) in cli.COMMANDS.items():
        assert f"  {command}" in out and what in out


def test_no_command_or_an_unknown_one_is_refused_with_the_list(capsys):
    assert cli.main([]) == 2
    assert "commands:" in capsys.readouterr().err
    assert cli.main(["bnech"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'bnech'" in err and "bench" in err


def test_a_command_gets_the_rest_of_the_line(tmp_path, capsys):
    assert cli.main(["timings", str(tmp_path)]) == 0
    assert "no chapter timings recorded yet" in capsys.readouterr().out


def test_every_tool_with_a_main_is_a_command():
    """A module of the package that defines ``main`` is reachable here."""
    package = ROOT / "src" / "normlimits"
    tools = set()
    for path in package.rglob("*.py"):
        text = path.read_text()
        if "\ndef main(" in text and path.name != "__main__.py":
            tools.add(".".join(path.relative_to(ROOT / "src").with_suffix("").parts))
    assert tools == {module for module, _ in cli.COMMANDS.values()}


def test_the_makefile_uses_the_command_line():
    make = (ROOT / "Makefile").read_text()
    assert "-m normlimits." not in make
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["normlimits"] == "normlimits.__main__:main"
