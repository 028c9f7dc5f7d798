"""``normlimits compare``: audits side by side (normlimits.audit.compare), and the shared tables."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from conftest import SHARED_CORPUS, make_tiny_gpt2
from normlimits.audit import command as audit, compare
from normlimits import claims
from normlimits.claims import schema
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

pytestmark = pytest.mark.skipif(not SHARED_CORPUS.is_file(), reason="the shared corpus is absent")
QUICK = ["--yardsticks", "vanishing", "jacobian", "--length", "32", "--quiet"]


def _tiny_llama(folder: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=128, attn_implementation="eager")
                     ).save_pretrained(folder)


@pytest.fixture(scope="module")
def audits(tmp_path_factory) -> dict[str, Path]:
    """Two quick audits (vanishing and jacobian) of different models with different settings:
    a tiny GPT-2 on 2 windows and a tiny Llama on 3 windows with the last-row critical-N protocol."""
    root = tmp_path_factory.mktemp("compare")
    make_tiny_gpt2(n_positions=128).save_pretrained(root / "gpt2")
    _tiny_llama(root / "llama")
    for name in ("gpt2", "llama"):
        (root / name / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    assert audit.main(["--model", str(root / "gpt2"), "--out", str(root / "a-gpt2"),
                       "--windows", "2", *QUICK]) == 0
    assert audit.main(["--model", str(root / "llama"), "--out", str(root / "a-llama"),
                       "--windows", "3", "--critical-protocol", "last_row", *QUICK]) == 0
    return {"gpt2": root / "a-gpt2", "llama": root / "a-llama", "root": root}


@pytest.fixture(scope="module")
def compared(audits) -> tuple[Path, dict]:
    from normlimits.__main__ import main

    out = audits["root"] / "cmp"
    assert main(["compare", str(audits["gpt2"]), str(audits["llama"]), "--out", str(out),
                 "--quiet"]) == 0
    return out, json.loads((out / "compare.json").read_text())


def test_compare_names_the_settings_that_differ(compared, audits):
    out, result = compared
    assert schema.problems(result, "compare") == []
    differing = set(result["differing_settings"])
    assert {"model", "model weights (digest of the files' sha256)", "windows",
            "window starts (token offsets)", "critical-N protocol"} <= differing
    assert not differing & {"corpus (sha256)", "dtype", "device", "window length L", "yardsticks",
                            "attention implementation", "seeds", "torch", "transformers"}
    windows = next(s for s in result["settings"] if s["setting"] == "windows")
    assert windows == {"setting": "windows", "values": [2, 3], "differs": True}
    assert [a["name"] for a in result["audits"]] == ["a-gpt2", "a-llama"]
    assert all(a["verified"] for a in result["audits"]) and not result["identical_results"]


def test_compare_lists_every_claim_with_each_verdict(compared, audits):
    _, result = compared
    docs = [json.loads((audits[k] / "audit.json").read_text()) for k in ("gpt2", "llama")]
    assert [c["id"] for c in result["claims"]] == ["NU", "C1", "F4", "EPS"]
    for c in result["claims"]:
        rows = [next(r for r in d["rows"] if r["id"] == c["id"]) for d in docs]
        assert c["cells"] == [{"verdict": r["verdict"], "value": r["value"]} for r in rows]
        assert c["verdicts_differ"] == (rows[0]["verdict"] != rows[1]["verdict"])


def test_compare_writes_overlaid_figures_and_a_self_contained_page(compared):
    out, result = compared
    assert sorted(result["figures"]) == ["jacobian", "vanishing"]
    for name, files in result["figures"].items():
        assert (out / files["png"]).read_bytes()[:4] == b"\x89PNG"
        assert (out / files["pdf"]).read_bytes()[:5] == b"%PDF-"
    page = (out / "compare.html").read_text()

    class Tags(HTMLParser):
        found: list = []

        def handle_starttag(self, tag, attrs):
            self.found.append((tag, dict(attrs)))

    tags = Tags()
    tags.feed(page)
    assert not [t for t, a in tags.found if t in ("script", "link", "img")]
    assert [a["data-figure"] for t, a in tags.found if t == "svg"] == ["vanishing", "jacobian"]
    marked = {a["data-setting"] for t, a in tags.found if t == "tr" and "differs" in a.get("class", "")
              and "data-setting" in a}
    assert marked == set(result["differing_settings"])
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["compare.json", "compare.html", "manifest.json",
         *(f"{n}.{k}" for n in ("jacobian", "vanishing") for k in ("png", "svg", "pdf"))])


def test_overlaid_curves_are_each_audits_own(audits):
    docs = [json.loads((audits[k] / "audit.json").read_text()) for k in ("gpt2", "llama")]
    fig = compare.plot_overlay(docs, ["a", "b"], "vanishing")
    lines = fig.axes[0].lines
    assert [line.get_label() for line in lines] == ["a", "b", "1/L (uniform)"]
    for line, doc in zip(lines, docs):
        assert list(line.get_ydata()) == doc["statistics"]["vanishing"]["median_max_weight"]
    assert len(compare.plot_overlay(docs, ["a", "b"], "critical_n").axes[0].lines) == 0
    with pytest.raises(ValueError, match="yardstick='entropy'"):
        compare.curve(docs[0], "entropy")


def _regraded(doc: dict, claim_id: str, values: dict) -> dict:
    """``doc`` with ``claim_id`` graded again on ``values`` by its registered rule."""
    other = copy.deepcopy(doc)
    old = next(r for r in other["rows"] if r["id"] == claim_id)
    new = claims.make_row(claim_id, values, old["measured"], chapter="audit", model=old["model"])
    other["rows"] = [new if r["id"] == claim_id else r for r in other["rows"]]
    return other


def test_a_differing_verdict_is_marked_and_the_tables_are_shared(audits):
    doc = json.loads((audits["gpt2"] / "audit.json").read_text())
    nu = {c["key"]: c["value"] for c in next(r for r in doc["rows"] if r["id"] == "NU")["criteria"]}
    other = _regraded(doc, "NU", {**nu, "exponent": -0.1})
    assert next(r for r in other["rows"] if r["id"] == "NU")["verdict"] != \
        next(r for r in doc["rows"] if r["id"] == "NU")["verdict"]
    assert other["provenance"]["results_sha256"] == doc["provenance"]["results_sha256"]
    result = compare.comparison([doc, other], ["a", "b"], [Path("a"), Path("b")], [True, False])
    flags = {c["id"]: c["verdicts_differ"] for c in result["claims"]}
    assert flags == {"NU": True, "C1": False, "F4": False, "EPS": False}
    assert result["differing_settings"] == [] and result["identical_results"] is False, \
        "the results hash is recomputed from the rows, never trusted (issue 50, item 4)"
    assert result["audits"][0]["results_sha256"] != result["audits"][1]["results_sha256"]
    frame = compare.statistics_frame([doc, other], ["a", "b"])
    assert frame.loc["largest-weight exponent in L (median head)"].tolist() == [nu["exponent"], -0.1]
    assert frame.loc["critical N / L at the largest L"].tolist() == [None, None]
    assert frame.loc["query / key-value heads per layer"].tolist() == ["4 / 4", "4 / 4"]
    verdicts = compare.verdict_frame([doc, other], ["a", "b"])
    assert list(verdicts.index) == ["NU", "C1", "F4", "EPS"]
    assert verdicts.loc["NU", "b"] == next(r for r in other["rows"] if r["id"] == "NU")["verdict"]


def test_column_names_are_unique():
    assert compare.column_names([Path("x/run"), Path("y/run"), Path("z/run/audit.json")]) == [
        "run", "run (2)", "run (3)"]


def test_bad_audits_are_refused_naming_them(audits, tmp_path, capsys):
    def error(*argv) -> str:
        with pytest.raises(SystemExit) as exc:
            compare.main([*map(str, argv), "--out", str(tmp_path / "o")])
        assert exc.value.code == 2
        return capsys.readouterr().err

    assert "pass two or more AUDIT_DIR" in error(audits["gpt2"])
    assert "no audit.json there" in error(audits["gpt2"], tmp_path)
    edited = tmp_path / "edited"
    edited.mkdir()
    for f in audits["gpt2"].iterdir():
        (edited / f.name).write_bytes(f.read_bytes())
    doc = json.loads((edited / "audit.json").read_text())
    doc["rows"][0]["verdict"] = "refuted"
    (edited / "audit.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert "was changed after the audit wrote it" in error(audits["gpt2"], edited)
    old = tmp_path / "old" / "audit.json"
    old.parent.mkdir()
    del doc["schema_version"]
    old.write_text(json.dumps(doc))
    err = error(audits["gpt2"], old)
    assert "schema_version: missing" in err and "Run the audit again" in err
    assert not (tmp_path / "o").exists()


def _copy_without_manifest(source: Path, folder: Path, edit) -> Path:
    """A copy of the audit folder ``source`` with its ``manifest.json`` deleted and its
    ``audit.json`` text changed by ``edit`` (text -> text)."""
    folder.mkdir()
    for f in source.iterdir():
        if f.name != "manifest.json":
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "audit.json").write_text(edit((folder / "audit.json").read_text()))
    return folder


def test_an_audit_edited_by_hand_is_never_reported_identical(audits, tmp_path, capsys):
    """Issue 50, item 4: one verdict edited, the manifest deleted: refused as edited; re-signed
    (its results_sha256 recomputed by the editor too): compared, and its results differ."""
    from normlimits.audit.provenance import results_sha256

    def flip(text: str) -> str:
        doc = json.loads(text)
        doc["rows"][0]["verdict"] = "refuted" if doc["rows"][0]["verdict"] != "refuted" else "supported"
        return json.dumps(doc, indent=2, sort_keys=True)

    edited = _copy_without_manifest(audits["gpt2"], tmp_path / "edited", flip)
    with pytest.raises(SystemExit) as exc:
        compare.main([str(audits["gpt2"]), str(edited), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "edited.audit.json was edited after it was written" in err.replace("/", ".")
    assert "its rows give the results sha256" in err and not (tmp_path / "o").exists()

    def flip_and_sign(text: str) -> str:
        doc = json.loads(flip(text))
        doc["provenance"]["results_sha256"] = results_sha256(doc["rows"])
        return json.dumps(doc, indent=2, sort_keys=True)

    signed = _copy_without_manifest(audits["gpt2"], tmp_path / "signed", flip_and_sign)
    assert compare.main([str(audits["gpt2"]), str(signed), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "results identical: no" in out and "results identical: yes" not in out, out
    result = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert result["identical_results"] is False and result["claims"][0]["verdicts_differ"]
    assert [a["verified"] for a in result["audits"]] == [True, False]


def test_an_audit_holding_nan_is_refused_and_compare_json_is_strict(audits, tmp_path, capsys,
                                                                    monkeypatch):
    """Issue 50, item 5: read as strictly as the audit writes (no NaN), and compare.json is never
    written with a bare NaN."""
    def nan_value(text: str) -> str:
        doc = json.loads(text)
        doc["rows"][0]["value"] = float("nan")
        return json.dumps(doc, indent=2, sort_keys=True)

    holding = _copy_without_manifest(audits["gpt2"], tmp_path / "nan", nan_value)
    assert "NaN" in (holding / "audit.json").read_text()
    with pytest.raises(SystemExit) as exc:
        compare.main([str(audits["gpt2"]), str(holding), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "is not readable strict JSON (it holds NaN, which is not JSON" in err, err
    assert not (tmp_path / "o").exists()

    real = compare.comparison

    def with_nan(*args, **kwargs):
        result = real(*args, **kwargs)
        result["claims"][0]["cells"][0]["value"] = float("nan")
        return result

    monkeypatch.setattr(compare, "comparison", with_nan)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        compare.run([audits["gpt2"], audits["llama"]], tmp_path / "o2")
    assert not (tmp_path / "o2").exists()
