"""A Ctrl-C that lands after the audit was written changes nothing: exit 0, the audit complete,
and a line saying what may be left (issue 50, item 9). A tiny saved GPT-2, 1 window of 64 bytes."""

from __future__ import annotations

import json

from conftest import make_tiny_gpt2
from normlimits.audit import command as audit
from normlimits.audit.resume import Resume
from normlimits.core.outputs import read_manifest
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE


def test_a_ctrl_c_after_the_audit_was_written_exits_0(tmp_path, monkeypatch, capsys):
    model = tmp_path / "model"
    make_tiny_gpt2(n_positions=128).save_pretrained(model)
    (model / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Resume, "finish", interrupted)
    out = tmp_path / "out"
    assert audit.main(["--model", str(model), "--windows", "1", "--length", "64", "--yardsticks",
                       "vanishing", "--quiet", "--out", str(out)]) == 0
    manifest = read_manifest(out)
    assert manifest is not None and "audit.json" in manifest["files"]
    err = capsys.readouterr().err
    assert "interrupted after the audit was written to" in err and "resume cache" in err, err
