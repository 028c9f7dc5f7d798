"""Sphinx extension: one setting, the repository's address, turns the site's online buttons on.

``_config.yml`` has ``repository.url`` (empty by default). Jupyter Book passes it to the theme as
``html_theme_options["repository_url"]``; this extension reads it once, when the configuration is
read, and derives every button from it:

* empty: no repository, issue, source or launch button (nothing would point anywhere); the
  download buttons (.md, .ipynb) stay;
* ``https://github.com/OWNER/REPO``: the repository, "open issue" and "show source" buttons, and
  for every executed chapter the Binder button (JupyterLab on the chapter's MyST source, with the
  environment of ``binder/``) and the Colab button. Colab cannot open MyST Markdown, so its button
  opens the chapter's notebook on the repository's ``colab`` branch, which the publishing workflow
  fills from ``python -m normlimits.book.colab`` (see README, "Publish the book").

A value that is not a GitHub repository address is an error naming the setting.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from sphinx.errors import ConfigError

BINDER_URL = "https://mybinder.org"
COLAB_URL = "https://colab.research.google.com"
#: the branch the publishing workflow writes the Colab notebooks to
COLAB_BRANCH = "colab"
SETTING = "repository.url in _config.yml"
GITHUB_REPO = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")
REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_source_button")
LAUNCH_KEYS = ("binderhub_url", "colab_url", "jupyterhub_url", "deepnote_url", "jupyterlite_url")


def github_parts(url: str) -> tuple[str, str]:
    """``(owner, repo)`` of a GitHub repository address; a clear error for anything else."""
    match = GITHUB_REPO.match(url.strip())
    if match is None:
        raise ConfigError(
            f"{SETTING} is {url!r}, which is not a GitHub repository address. Set it to "
            f"https://github.com/OWNER/REPO (the launch buttons need GitHub: Binder and Colab "
            f"open the chapters from there), or leave it empty for a site without online buttons.")
    return match.group(1), match.group(2)


def publish_options(theme_options: dict) -> dict:
    """The theme options with every repository and launch button derived from the address.

    Returns a new dict; the address itself is normalised (no trailing slash or ``.git``).
    """
    options = dict(theme_options)
    launch = dict(options.get("launch_buttons") or {})
    url = (options.get("repository_url") or "").strip()
    if not url:
        options.pop("repository_url", None)
        for key in REPOSITORY_BUTTONS + ("use_edit_page_button",):
            options[key] = False
        for key in LAUNCH_KEYS:
            launch.pop(key, None)
    else:
        owner, repo = github_parts(url)
        options["repository_url"] = f"https://github.com/{owner}/{repo}"
        options.setdefault("repository_branch", "main")
        for key in REPOSITORY_BUTTONS:
            options[key] = True
        launch.update(binderhub_url=BINDER_URL, colab_url=COLAB_URL, notebook_interface="jupyterlab")
    options["launch_buttons"] = launch
    return options


def colab_url(owner: str, repo: str, pagename: str) -> str:
    """Where the Colab button of page ``pagename`` (e.g. ``book/vanishing``) points."""
    return f"{COLAB_URL}/github/{owner}/{repo}/blob/{COLAB_BRANCH}/{PurePosixPath(pagename)}.ipynb"


def _configure(app, config) -> None:
    config.html_theme_options = publish_options(config.html_theme_options or {})


def _iter_buttons(buttons):
    for button in buttons:
        yield button
        yield from _iter_buttons(button.get("buttons") or ())


def _point_colab_at_notebooks(app, pagename, templatename, context, doctree) -> None:
    url = app.config.html_theme_options.get("repository_url")
    if not url:
        return
    owner, repo = github_parts(url)
    for button in _iter_buttons(context.get("header_buttons") or ()):
        if button.get("text") == "Colab":
            button["url"] = colab_url(owner, repo, pagename)


def setup(app):
    app.connect("config-inited", _configure)
    # after the theme added its launch buttons (priority 501)
    app.connect("html-page-context", _point_colab_at_notebooks, priority=600)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
