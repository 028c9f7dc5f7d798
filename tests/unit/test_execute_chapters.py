"""The chapters executed side by side into the execution cache before Sphinx reads them
(normlimits.book.execute_chapters), on a tiny book of three notebook pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from normlimits.book import execute_chapters as X
from normlimits.core.settings import SettingError

CONFIG = """title: tiny
execute:
  execute_notebooks: {mode}
  cache: "_build/.jupyter_cache"
  timeout: 120
  raise_on_error: true
parse:
  myst_enable_extensions: [amsmath, colon_fence, dollarmath]
"""

PAGE = """---
jupytext:
  text_representation: {{extension: .md, format_name: myst, format_version: 0.13}}
kernelspec: {{display_name: Python 3, language: python, name: python3}}
---

# Page {name}

```{{code-cell}} ipython3
:tags: [hide-input]
import json, os, time
start = time.time()
time.sleep({sleep})
{extra}
```

:::{{note}}
A colon fence, then display maths.
:::

$$ x = 1 $$

```{{code-cell}} ipython3
from myst_nb import glue
glue("threads_{name}", os.environ.get("NORMLIMITS_THREADS", "unset"))
with open("../{name}.span", "w") as f:
    json.dump([start, time.time(), os.getcwd()], f)
```

Threads: {{glue:text}}`threads_{name}`.
"""


def make_book(root: Path, pages: dict[str, str], *, mode: str = "cache", sleep: float = 0.0) -> Path:
    """A book at ``root``: an intro page and one notebook page per entry of ``pages`` (name -> an
    extra line of code), each recording when it ran in ``<root>/<name>.span``."""
    (root / "book").mkdir(parents=True)
    (root / "_config.yml").write_text(CONFIG.format(mode=mode))
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n"
                                   + "".join(f"  - file: book/{name}\n" for name in pages))
    (root / "book" / "intro.md").write_text("# Intro\n\nNo code here.\n")
    for name, extra in pages.items():
        (root / "book" / f"{name}.md").write_text(PAGE.format(name=name, sleep=sleep, extra=extra))
    return root


def span(root: Path, name: str) -> list:
    return json.loads((root / f"{name}.span").read_text())


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    for name in ("NORMLIMITS_LEDGER_DIR", X.AT_ONCE_ENV, "NORMLIMITS_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NORMLIMITS_THREADS", "2")
    monkeypatch.setattr(X, "thread_count", lambda: 2)      # as on 2 cores, whatever this machine has


def test_sphinx_finds_every_chapter_executed_ahead_in_its_cache(tmp_path):
    """The whole point: the notebooks cached here are the ones myst-nb looks up (same reader, same
    hash), so the strict build executes nothing and shows what the kernels computed."""
    root = make_book(tmp_path / "tiny", {"one": "", "two": ""})
    record = X.execute_into_cache(root, log=lambda *_: None)
    assert set(record["executed_seconds"]) == {"one", "two"} and record["chapters_at_once"] == 2
    assert record["threads_each"] == 1 and record["from_cache"] == []
    assert json.loads((root / "_build" / "ledger" / X.REPORT_FILE).read_text()) == record
    assert span(root, "one")[2] == str(root / "book")           # each ran in its own folder
    build = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(root),
                            "--builder", "html", "-W", "-n", "--keep-going"], cwd=root,
                           capture_output=True, text=True)
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-3000:]
    assert "Executing notebook" not in log and log.count("Using cached notebook") == 2, log[-3000:]
    html = (root / "_build" / "html" / "book" / "one.html").read_text()
    assert "Threads: <span class=\"pasted-text\">1</span>" in html     # one thread each, side by side


def test_side_by_side_longest_first_then_the_cost_chapter_alone_on_every_thread(tmp_path):
    root = make_book(tmp_path / "tiny", {"short": "", "long": "time.sleep(1.5)", "cost": ""}, sleep=1.0)
    (root / "_build" / "ledger").mkdir(parents=True)
    for name, seconds in (("short", 5.0), ("long", 50.0), ("cost", 500.0)):
        (root / "_build" / "ledger" / f"{name}.timing.json").write_text(json.dumps({"seconds": seconds}))
    record = X.execute_into_cache(root, log=lambda *_: None)
    assert record["side_by_side"] == ["long", "short"] and record["alone_last"] == ["cost"]
    short, long, cost = span(root, "short"), span(root, "long"), span(root, "cost")
    assert short[0] < long[1] and long[0] < short[1], "the two chapters did not run at the same time"
    assert cost[0] >= max(short[1], long[1]), "the cost chapter started before the others ended"
    assert record["wall_seconds"] < sum(record["executed_seconds"].values())
    # where each chapter's time went: its first code cell slept 2.5 s (the other one imports myst-nb)
    slowest = {c["line"]: c for c in record["slowest_cells"]["long"]}
    assert set(slowest) == {"import json, os, time", "from myst_nb import glue"}
    assert slowest["import json, os, time"]["seconds"] >= 2.5
    assert sum(c["seconds"] for c in slowest.values()) <= record["executed_seconds"]["long"] + 0.1
    assert set(record["slowest_cells"]) == {"short", "long", "cost"}
    # the timing is not stored with the cached notebooks (myst-nb stores them without)
    from jupyter_cache import get_cache
    stored = [get_cache(str(root / "_build" / ".jupyter_cache")).get_cache_bundle(r.pk).nb
              for r in get_cache(str(root / "_build" / ".jupyter_cache")).list_cache_records()]
    assert len(stored) == 3
    assert all("execution" not in c.metadata for nb in stored for c in nb.cells)
    cached = X.execute_into_cache(root, log=lambda *_: None)          # nothing left to execute
    assert cached["executed_seconds"] == {} and sorted(cached["from_cache"]) == ["cost", "long", "short"]
    assert json.loads((root / "_build" / "ledger" / X.REPORT_FILE).read_text()) == record   # kept


def test_the_glued_threads_of_the_cost_chapter_are_the_builds(tmp_path):
    """Alone at the end, the cost chapter's kernel keeps the build's NORMLIMITS_THREADS."""
    from jupyter_cache import get_cache

    root = make_book(tmp_path / "tiny", {"one": "", "cost": ""})
    X.execute_into_cache(root, log=lambda *_: None)
    cache = get_cache(str(root / "_build" / ".jupyter_cache"))
    settings = X.build_settings(root)
    glued = {}
    for name in ("one", "cost"):
        record = cache.match_cache_notebook(X.read_page(root / "book" / f"{name}.md", settings.md_config))
        notebook = cache.get_cache_bundle(record.pk).nb
        glued[name] = [o for c in notebook.cells for o in c.get("outputs", [])
                       if o.get("metadata", {}).get("scrapbook")][0]["data"]["text/plain"]
    assert glued == {"one": "'1'", "cost": "'2'"}


def test_a_failing_chapter_is_named_not_cached_and_the_cost_chapter_not_run(tmp_path, capsys):
    from jupyter_cache import get_cache

    root = make_book(tmp_path / "tiny", {"good": "", "bad": "raise RuntimeError('planted failure')",
                                        "cost": ""})
    with pytest.raises(X.ChapterFailed, match=r"(?s)book/bad\.md failed to execute.*planted failure"):
        X.execute_into_cache(root, log=lambda *_: None)
    assert not (root / "cost.span").exists()
    cache = get_cache(str(root / "_build" / ".jupyter_cache"))
    md = X.build_settings(root).md_config
    with pytest.raises(KeyError):
        cache.match_cache_notebook(X.read_page(root / "book" / "bad.md", md))
    assert cache.match_cache_notebook(X.read_page(root / "book" / "good.md", md)) is not None
    assert X.main([str(root)]) == 1
    assert "bad.md failed to execute" in capsys.readouterr().err


def test_only_a_cache_can_be_filled_ahead_and_another_mode_is_left_to_sphinx(tmp_path, capsys):
    root = make_book(tmp_path / "tiny", {"one": ""}, mode="force")
    with pytest.raises(SettingError, match="execute_notebooks is 'force'.*set it to cache"):
        X.execute_into_cache(root, log=lambda *_: None)
    assert X.main([str(root)]) == 0                 # make book goes on; Sphinx executes as asked
    assert "nothing executed ahead" in capsys.readouterr().out and not (root / "one.span").exists()
    assert X.main([str(tmp_path)]) == 2 and "no book" in capsys.readouterr().err


def test_how_many_chapters_at_once(monkeypatch):
    assert [X.chapters_at_once(n) for n in (0, 1, 5)] == [1, 1, 2]
    monkeypatch.setenv(X.AT_ONCE_ENV, "1")
    assert X.chapters_at_once(5) == 1
    monkeypatch.setenv(X.AT_ONCE_ENV, "3")
    assert X.chapters_at_once(5) == 3 and X.chapters_at_once(2) == 2
    for bad, why in (("0", "must be at least 1"), ("-1", "must be at least 1"), ("two", "is not an integer")):
        monkeypatch.setenv(X.AT_ONCE_ENV, bad)
        with pytest.raises(SettingError, match=f"{X.AT_ONCE_ENV}='{bad}' {why}; set it to a positive integer"):
            X.chapters_at_once(5)


def test_the_order_comes_from_the_last_build_else_the_calibration(tmp_path):
    from normlimits.experiments.book_projection import CALIBRATION

    (tmp_path / "vanishing.timing.json").write_text(json.dumps({"seconds": 999.0}))
    (tmp_path / "setup.timing.json").write_text("{damaged")
    expected = X.expected_seconds(["vanishing", "setup", "unknown"], tmp_path, model="smollm2-135m")
    assert expected == {"vanishing": 999.0, "setup": CALIBRATION[0].chapters["setup"], "unknown": 0.0}
    large = CALIBRATION[1]                  # a model a calibration build ran on: that build's times
    assert X.expected_seconds(["setup"], tmp_path, model=large.model) == {"setup": large.chapters["setup"]}
    assert X.schedule(["a", "cost", "b", "c"], {"a": 1.0, "b": 3.0, "c": 1.0, "cost": 9.0}) == (
        ["b", "a", "c"], ["cost"])


def test_the_real_books_pages_are_read_as_myst_nb_reads_them():
    """Every chapter of the book reads as a notebook with its code cells (a page myst-nb would not
    read as a notebook would be executed by Sphinx instead)."""
    from normlimits.book.pages import notebook_pages
    from normlimits.core.paths import book_root

    root = book_root(Path(__file__).resolve().parent)
    md = X.build_settings(root).md_config
    for page in notebook_pages(root):
        notebook = X.read_page(page, md)
        assert notebook is not None and notebook.metadata["kernelspec"]["name"] == "python3", page
        assert sum(c.cell_type == "code" for c in notebook.cells) >= 2, page
