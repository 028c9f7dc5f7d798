"""`make lab` configures JupyterLab to open chapters as notebooks through jupytext."""

import json

from normlimits.lab import VIEWERS, write_overrides


def test_overrides_make_markdown_open_as_notebooks_and_keep_other_settings(tmp_path):
    path = write_overrides(tmp_path)
    path.write_text(json.dumps({"other": {"x": 1}}))
    write_overrides(tmp_path)
    settings = json.loads(path.read_text())
    assert settings["other"] == {"x": 1}
    assert settings["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"] == VIEWERS
