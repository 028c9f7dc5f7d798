"""The architectures chapter's machinery: the model list, skipped models with their reasons, the
yardsticks per model through the audit's code, the tables and figures."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.audit import architectures as A
from normlimits.model.corpus import Corpus
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE, positions_of
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model
from normlimits.core.settings import SettingError

LENGTH = 64
TEXT = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 60)
CORPUS = Corpus(TEXT, hashlib.sha256(TEXT.encode()).hexdigest(), "test text")


def test_model_names_default_setting_and_errors(monkeypatch):
    monkeypatch.delenv(A.ARCHITECTURES_ENV, raising=False)
    assert A.model_names()[:2] == ["standin", "standin-rope"]
    assert "gpt2-medium" in A.model_names(), "the paper's 'larger variants' remark is tested online"
    monkeypatch.setenv(A.ARCHITECTURES_ENV, " standin-rope, gpt2 ,standin-rope")
    assert A.model_names() == ["standin-rope", "gpt2"]
    with pytest.raises(SettingError, match="NORMLIMITS_ARCHITECTURES=' , ' names no model"):
        A.model_names(" , ")


def test_positions_are_named_from_the_configuration():
    from transformers import BloomConfig, GPT2Config, LlamaConfig

    assert positions_of(GPT2Config()) == "learned absolute"
    assert positions_of(LlamaConfig()) == "rotary (RoPE)"
    assert positions_of(BloomConfig()) == "ALiBi"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny GPT-2 and a tiny Llama (grouped-query attention) saved with the byte tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=128,
                                         attn_implementation="eager"))
    out = {}
    for name, model in (("gpt2", make_tiny_gpt2(n_positions=128)), ("llama", llama)):
        model.save_pretrained(root / name)
        (root / name / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def surveyed(folders):
    names = [str(folders["gpt2"]), "no/such/model/folder", str(folders["llama"])]
    return list(A.survey(names, CORPUS, 2, max_length=LENGTH,
                         loader=lambda n: load_model(n, origin=A.ARCHITECTURES_ENV)))


def test_a_model_that_cannot_be_loaded_is_skipped_with_its_reason(surveyed):
    skipped = [r for r in surveyed if isinstance(r, A.Skipped)]
    assert [s.name for s in skipped] == ["no/such/model/folder"]
    assert "NORMLIMITS_ARCHITECTURES='no/such/model/folder': no such directory" in skipped[0].reason


def test_an_offline_hub_id_is_skipped_saying_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (skipped,) = A.survey(["EleutherAI/pythia-160m-not-cached"], CORPUS, 1)
    assert isinstance(skipped, A.Skipped)
    assert "not available" in skipped.reason and "HF_HUB_OFFLINE=1" in skipped.reason


def test_every_loaded_model_gets_every_yardsticks_rows(surveyed):
    done = [r for r in surveyed if isinstance(r, A.Surveyed)]
    assert [r.family for r in done] == ["gpt2", "llama"]
    assert [r.positions for r in done] == ["learned absolute", "rotary (RoPE)"]
    assert done[1].kv_heads == 2 and done[1].heads == 4
    expected = [c for claims in A.YARDSTICK_CLAIMS.values() for c in claims]
    for r in done:
        assert [row["id"] for row in r.rows()] == expected
        assert all(row["model"] == r.label for row in r.rows())
        assert r.length == LENGTH and r.windows == 2


def test_the_yardsticks_are_the_audits(surveyed, folders):
    """Same model, same windows: the survey's rows are the audit's rows."""
    from normlimits.audit.command import run_audit
    from normlimits.model.corpus import token_windows
    from normlimits.audit.yardsticks import AuditConfig

    loaded = load_model(str(folders["llama"]))
    torch.manual_seed(0)
    run = run_audit(loaded, token_windows(loaded, CORPUS, LENGTH, 2), AuditConfig(length=LENGTH))
    direct = [row for m in run["measured"].values() for row in m.rows]
    llama = [r for r in surveyed if isinstance(r, A.Surveyed)][1]
    assert [(r["id"], r["verdict"]) for r in direct] == [(r["id"], r["verdict"]) for r in llama.rows()]
    for a, b in zip(direct, llama.rows()):
        for ca, cb in zip(a["criteria"], b["criteria"]):
            assert ca["key"] == cb["key"] and ca["passed"] == cb["passed"]
            if ca["value"] is None:
                assert cb["value"] is None
            else:
                assert cb["value"] == pytest.approx(ca["value"], rel=1e-6, abs=1e-9), (a["id"], ca["key"])


def test_tables_and_figures(surveyed):
    done = [r for r in surveyed if isinstance(r, A.Surveyed)]
    table = A.comparison_table(done)
    assert list(table.columns) == [r.name for r in done]
    assert table.loc["positions"].tolist() == ["learned absolute", "rotary (RoPE)"]
    assert table.loc["query / key-value heads per layer"].tolist() == ["4 / 4", "4 / 2"]
    assert table.loc["N_s/N plateau (median head)"].tolist() == [r.criterion("F3", "level") for r in done]
    assert all(v is not None for v in table.loc["slope of g in T at low T (deviation from -1)"])
    assert done[0].criterion("F3", "no-such-key") is None and done[0].criterion("XYZ", "level") is None
    verdicts = A.verdict_table(done)
    assert list(verdicts.index) == ["NU", "C1", "F2c", "F2a", "F3", "F4", "EPS"]
    assert all(": " in cell for cell in verdicts.to_numpy().ravel())
    for yardstick in A.YARDSTICK_CLAIMS:
        fig = A.plot_yardstick(done, yardstick)
        assert len(fig.axes[0].lines) >= len(done)
        assert [line.get_label() for line in fig.axes[0].lines][:2] == [
            f"{r.name} ({r.positions})" for r in done]
    with pytest.raises(ValueError, match="yardstick='entropy'"):
        A.plot_yardstick(done, "entropy")


def test_two_windows_give_every_estimated_claim_an_interval_shown_in_the_tables(surveyed):
    """On two windows every yardstick claim but C1 (a count over every window) carries an interval
    over the windows; the verdict table and the chapter's numbers show it as value [low, high]."""
    from normlimits.core.markup import with_interval

    for r in (x for x in surveyed if isinstance(x, A.Surveyed)):
        assert r.with_intervals() == ["NU", "F2c", "F2a", "F3", "F4", "EPS"]
        table = A.verdict_table([r])[r.name]
        for row in r.rows():
            head = next(c for c in row["criteria"] if c["key"] == row["headline"])
            assert table[row["id"]].startswith(f"{row['verdict']}: {A.holds(row['verdict'])}; ")
            shown = table[row["id"]].rsplit("; ", 1)[1]
            if row["id"] == "C1":
                assert "[" not in shown and "resampling" not in row
            else:
                assert row["resampling"]["n"] == 2 and row["interval"] == head["interval"]
                assert shown == f"{row['headline']} {with_interval(row['value'], row['interval'])} (range over 2 windows)"
        fraction = next(c for row in r.rows() if row["id"] == "F2c" for c in row["criteria"]
                        if c["key"] == "fraction")
        assert r.criterion_text("F2c", "fraction") == \
            with_interval(fraction["value"], fraction["interval"]) + " (range over 2 windows)"
    # a row without an interval (one window) shows its value alone, an unmeasured one n/a
    assert A.headline_text({"headline": "fraction", "value": 0.5}) == "fraction 0.500"
    assert A.headline_text({"headline": "fraction", "value": None}) == "fraction n/a"


def test_the_chapters_curves_are_the_measured_ones(surveyed):
    """The figure's curves (read by normlimits.audit.compare from the statistics an audit writes) are
    the curves computed from the yardsticks' own results, as the chapter drew them before."""
    import numpy as np

    from normlimits.audit.compare import curve

    for r in (x for x in surveyed if isinstance(x, A.Surveyed)):
        doc = r.document()
        stats = r.measured["vanishing"].result["stats"]
        maxw = torch.exp(torch.log(stats.max_weight).mean(0)).reshape(-1, len(stats.lengths)).numpy()
        x, y = curve(doc, "vanishing")
        assert np.array_equal(x, stats.lengths.numpy()) and np.array_equal(y, np.median(maxw, 0))
        search = r.measured["critical_n"].result["row"].search
        alpha = r.measured["critical_n"].statistics["alpha"]
        want = np.asarray([np.nan if f is None else f for f in search.fraction(alpha)], dtype=float)
        assert np.array_equal(curve(doc, "critical_n")[1], want, equal_nan=True)
        c = r.measured["jacobian"].result["curves"]
        x, y = curve(doc, "jacobian")
        assert np.array_equal(x, c.t) and np.array_equal(y, c.g[:, int(np.argmin(c.eps))])
        x, y = curve(doc, "separability")
        assert np.array_equal(y, r.measured["separability"].result["figure3"]["median"])


def test_holds_reads_every_verdict():
    from normlimits.claims.rules import VERDICTS

    assert set(A.HOLDS) == set(VERDICTS)
    assert A.holds("refuted") == "does not hold" and A.holds("corrected") == "holds (corrected form)"


def test_a_model_loaded_once_surveys_again_as_a_fresh_load_does(surveyed, folders):
    """The chapter surveys its real model on three more texts with ``loader=lambda name: loaded``
    (one load, not three): the rows equal those of a survey that loads the model itself, and a
    second survey of the same instance gives them again (the audit leaves the model as it was)."""
    name = str(folders["llama"])
    loaded = A.load_surveyed(name)
    fresh = next(r for r in surveyed if isinstance(r, A.Surveyed) and r.family == "llama")
    calls = []
    for _ in range(2):
        (again,) = A.survey([name], CORPUS, 2, max_length=LENGTH,
                            loader=lambda n: calls.append(n) or loaded)
        assert isinstance(again, A.Surveyed) and again.rows() == fresh.rows()
    assert calls == [name, name]
