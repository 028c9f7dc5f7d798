"""Nothing a user owns is ever lost or silently wrong (issue 33).

The four data-loss cases, reproduced: a user's files in ``audit --out`` survive; a damaged
capture-cache entry (same size, last 4 KiB overwritten) is never served; two audits into one
folder give one complete audit and one clear refusal; an interrupted audit leaves the old folder
intact, or nothing new. Then the smaller ones, each a clear error: unwritable outputs found before
any computing, the bench's argument errors (exit 2, the usage line, a remedy that works), the
ledger folder, temperatures too large for the dtype, corpus messages naming their source, the
Jacobian checks' messages, and files created as the umask says.

Every audit here runs on a tiny saved GPT-2 (no training), 1 or 2 windows of 64 bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.audit import command as audit
from normlimits.experiments import bench
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE
from normlimits.core.outputs import MANIFEST, FileOutput, FolderOutput, OutputError, read_manifest
from normlimits.core.settings import SettingError

LENGTH = 64


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-bytes")
    make_tiny_gpt2(n_positions=128).save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return folder


def _argv(model_folder, out, *extra) -> list[str]:
    return ["--model", str(model_folder), "--windows", "1", "--length", str(LENGTH),
            "--yardsticks", "vanishing", "--quiet", "--out", str(out), *extra]


def _refused(argv, capsys, main=audit.main) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err, err
    return err


def _fingerprint(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _complete_audit(out: Path) -> dict:
    """The folder is one complete audit: its manifest lists exactly its files, all verified."""
    manifest = read_manifest(out)
    assert manifest is not None and manifest["tool"] == audit.PROG
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([*manifest["files"], MANIFEST])
    for name, info in manifest["files"].items():
        data = (out / name).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"]
    doc = json.loads((out / "audit.json").read_text())
    assert sorted(manifest["files"]) == sorted(
        ["audit.json", "report.md", "report.html",
         *[f"{n}.{kind}" for n in doc["settings"]["yardsticks"] for kind in ("png", "svg", "pdf")]])
    return doc


def _no_leftovers(parent: Path, resume: bool = False) -> None:
    """No temporary folder or lock file beside the output (``resume``: an interrupted audit's
    hidden resume cache may remain, which a re-run uses)."""
    left = [p.name for p in parent.iterdir() if p.name.startswith(".")
            and not (resume and ".resume-" in p.name)]
    assert left == [], f"temporary folders or lock files left: {left}"


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model fails the test: the refusal must come before any computing."""
    import normlimits.model.load

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(normlimits.model.load, "load_model", refuse)


def _read_only(monkeypatch, *folders: Path) -> None:
    """``os.access`` says ``folders`` cannot be written (as a read-only mount would; the tests may
    run as root, for whom a chmod changes nothing)."""
    real = os.access
    blocked = [str(f) for f in folders]

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and any(str(path) == b or str(path).startswith(b + os.sep) for b in blocked):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


# ================================================================ 1. the user's files survive

def test_a_folder_of_the_users_files_is_refused_and_left_as_it_was(model_folder, tmp_path, capsys,
                                                                   no_model_load):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own report")
    (out / "jacobian.png").write_bytes(b"my own figure")
    (out / "notes.txt").write_text("my notes")
    before = _fingerprint(out)
    err = _refused(_argv(model_folder, out), capsys)
    assert "--out" in err and "not empty" in err and "pass another --out" in err, err
    assert _fingerprint(out) == before
    err = _refused(_argv(model_folder, out, "--force"), capsys)    # --force is for earlier audits
    assert "--force replaces only an earlier output" in err, err
    assert _fingerprint(out) == before
    _no_leftovers(tmp_path)


def test_an_empty_out_is_refused_and_the_current_folder_untouched(model_folder, tmp_path, capsys,
                                                                  monkeypatch, no_model_load):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.md").write_text("mine")
    (tmp_path / "separability.png").write_bytes(b"mine too")
    before = _fingerprint(tmp_path)
    for blank in ("", "  "):
        err = _refused(_argv(model_folder, blank), capsys)
        assert "--out is empty" in err, err
    assert _fingerprint(tmp_path) == before


def test_an_earlier_audit_is_replaced_as_a_whole_and_a_changed_one_only_with_force(
        model_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert audit.main(_argv(model_folder, out, "--yardsticks", "vanishing", "jacobian")) == 0
    assert _complete_audit(out)["settings"]["yardsticks"] == ["vanishing", "jacobian"]
    # an unchanged earlier audit: replaced whole, no figure of the old run left behind
    assert audit.main(_argv(model_folder, out)) == 0
    assert _complete_audit(out)["settings"]["yardsticks"] == ["vanishing"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    # the user adds notes to it: refused, then --force moves the old folder aside
    (out / "notes.txt").write_text("my notes on this audit")
    before = _fingerprint(out)
    err = _refused(_argv(model_folder, out, "--yardsticks", "jacobian"), capsys)
    assert "changed since" in err and "notes.txt" in err and "--force" in err, err
    assert _fingerprint(out) == before
    assert audit.main(_argv(model_folder, out, "--yardsticks", "jacobian", "--force")) == 0
    assert _complete_audit(out)["settings"]["yardsticks"] == ["jacobian"]
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("out.previous-")]
    assert _fingerprint(aside) == before, "the old audit and the user's notes are kept, not deleted"
    _no_leftovers(tmp_path)


def test_another_tools_manifest_is_not_an_earlier_audit(model_folder, tmp_path, capsys, no_model_load):
    out = tmp_path / "other"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"tool": "something else", "files": {}}))
    err = _refused(_argv(model_folder, out), capsys)
    assert "'something else'" in err, err


# ================================================================ 2. a damaged cache entry

def test_a_damaged_capture_cache_entry_of_the_same_size_is_never_served(tiny_loaded, tmp_path,
                                                                        monkeypatch):
    from normlimits.model import capture_cache as cc
    from normlimits.model.capture_cache import cached_captures
    from normlimits.model.capture import iter_captures
    from normlimits.model.corpus import Corpus, token_windows

    text = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 8
    corpus = Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test")
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, str(tmp_path / "captures"))
    fresh = list(iter_captures(tiny_loaded, token_windows(tiny_loaded, corpus, LENGTH, 2)))
    list(cached_captures(tiny_loaded, corpus, LENGTH, 2))
    [entry] = list((tmp_path / "captures").iterdir())
    target = entry / "window-0001.safetensors"
    data = target.read_bytes()
    assert len(data) > 2 * 4096
    damaged = data[:-4096] + torch.randn(1024).numpy().tobytes()
    assert len(damaged) == len(data)
    target.write_bytes(damaged)
    for _ in range(2):                                       # on every rerun
        with pytest.warns(UserWarning, match=r"window-0001.safetensors is damaged.*not used"):
            served = list(cached_captures(tiny_loaded, corpus, LENGTH, 2))
        for got, want in zip(served, fresh):
            for name in cc.FIELDS:
                assert torch.equal(getattr(got, name), getattr(want, name))
        target.write_bytes(damaged)
    # an entry without its checksum (a crash between the two writes) is recomputed too
    cc.checksum_path(target).unlink()
    with pytest.warns(UserWarning, match="window-0001.safetensors has no checksum"):
        served = list(cached_captures(tiny_loaded, corpus, LENGTH, 2))
    assert torch.equal(served[1].hidden, fresh[1].hidden)


# ================================================================ 3. two audits into one folder

def test_two_audits_into_one_folder_give_one_complete_audit_and_one_refusal(
        model_folder, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    started, go = threading.Event(), threading.Event()
    real = audit.run_audit

    def slow_run(*args, **kwargs):
        started.set()
        assert go.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(audit, "run_audit", slow_run)
    result = {}

    def run_a():
        try:
            result["code"] = audit.main(_argv(model_folder, out, "--yardsticks", "vanishing",
                                              "jacobian"))
        except BaseException as exc:        # noqa: BLE001 - reported below
            result["error"] = exc

    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert started.wait(120), "audit A did not start"
        err = _refused(_argv(model_folder, out, "--yardsticks", "separability"), capsys)
        assert "another normlimits audit is writing to this folder now" in err, err
        assert "wait for it to finish, or pass another --out" in err, err
    finally:
        go.set()
        a.join(120)
    assert result.get("code") == 0, result
    assert _complete_audit(out)["settings"]["yardsticks"] == ["vanishing", "jacobian"]
    _no_leftovers(tmp_path)


def test_the_lock_refuses_a_second_writer_of_a_file_too(tmp_path):
    first = FileOutput(tmp_path / "bench.json", tool="bench", option="--output", is_ours=lambda p: True)
    with pytest.raises(OutputError, match="another bench is writing this file now"):
        FileOutput(tmp_path / "bench.json", tool="bench", option="--output", is_ours=lambda p: True)
    first.commit(b"[]")
    FileOutput(tmp_path / "bench.json", tool="bench", option="--output", is_ours=lambda p: True).abort()


# ================================================================ 4. interrupted audits

def _interrupt_forward(monkeypatch, at: int = 2) -> None:
    """Ctrl-C during the forward pass of window ``at`` (where the main thread spends its time;
    the audit's forward passes go through its resume cache, normlimits.model.capture_cache.serve)."""
    import normlimits.model.capture_cache

    real, calls = normlimits.model.capture_cache.capture_window, []

    def capture(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(normlimits.model.capture_cache, "capture_window", capture)


def test_an_interrupted_audit_leaves_the_old_folder_intact(model_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert audit.main(_argv(model_folder, out)) == 0
    before = _fingerprint(out)
    # interrupted while computing ...
    _interrupt_forward(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        audit.main(_argv(model_folder, out, "--windows", "2"))
    assert _fingerprint(out) == before
    monkeypatch.undo()
    # ... and while writing its files
    calls = []
    real_write = FolderOutput.write

    def write_then_stop(self, name, data):
        calls.append(name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(self, name, data)

    monkeypatch.setattr(FolderOutput, "write", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        audit.main(_argv(model_folder, out, "--windows", "2", "--yardsticks", "vanishing", "jacobian"))
    assert _fingerprint(out) == before
    assert _complete_audit(out)["settings"]["windows"] == 1
    _no_leftovers(tmp_path, resume=True)


def test_an_interrupted_first_audit_leaves_nothing_but_its_resume_cache(model_folder, tmp_path,
                                                                         monkeypatch):
    """No output, no temporary folder, no lock; only the hidden resume cache of the window it
    finished (issue 36: a re-run resumes from it), and with --no-resume nothing at all."""
    _interrupt_forward(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        audit.main(_argv(model_folder, tmp_path / "out", "--windows", "2"))
    [left] = list(tmp_path.iterdir())
    assert left.name.startswith(".out.resume-")
    assert sorted(p.name for p in left.iterdir()) == ["key.json", "window-0000.safetensors",
                                                      "window-0000.sha256"]
    _interrupt_forward(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        audit.main(_argv(model_folder, tmp_path / "out2", "--windows", "2", "--no-resume"))
    assert list(tmp_path.iterdir()) == [left]


def test_a_killed_audits_temporary_folder_is_hidden_and_removed_by_the_next(model_folder, tmp_path):
    out = tmp_path / "out"
    output = FolderOutput(out, tool=audit.PROG)
    output.write("vanishing.png", b"half a run")
    output._lock.release()                      # as a kill leaves it: the folder, no lock holder
    assert not out.exists()
    assert audit.main(_argv(model_folder, out)) == 0
    _complete_audit(out)
    _no_leftovers(tmp_path)


# ================================================================ unwritable outputs, early

def test_an_unwritable_out_is_refused_before_the_model_loads(model_folder, tmp_path, capsys,
                                                             monkeypatch, no_model_load):
    _read_only(monkeypatch, tmp_path / "ro")
    (tmp_path / "ro").mkdir()
    err = _refused(_argv(model_folder, tmp_path / "ro" / "out"), capsys)
    assert "--out" in err and "is not writable" in err and "writable place" in err, err
    (tmp_path / "ro-out").mkdir()
    _read_only(monkeypatch, tmp_path / "ro-out")
    err = _refused(_argv(model_folder, tmp_path / "ro-out"), capsys)
    assert "--out" in err and "not writable" in err, err


def test_an_out_under_a_file_is_refused_before_the_model_loads(model_folder, tmp_path, capsys,
                                                               no_model_load):
    (tmp_path / "a-file").write_text("x")
    err = _refused(_argv(model_folder, tmp_path / "a-file" / "out"), capsys)
    assert "--out" in err and "cannot be created" in err, err


def test_bench_output_that_is_a_folder_is_refused_before_the_model_loads(tmp_path, capsys,
                                                                        no_model_load):
    err = _refused(["--output", str(tmp_path)], capsys, bench.main)
    assert "--output" in err and "is a folder" in err and "bench.json" in err, err
    err = _refused(["--output", ""], capsys, bench.main)
    assert "--output is empty" in err, err


def test_bench_output_never_overwrites_a_file_it_did_not_write(tmp_path, capsys, no_model_load):
    mine = tmp_path / "results.json"
    mine.write_text('{"my": "results"}')
    err = _refused(["--output", str(mine)], capsys, bench.main)
    assert "not an earlier output" in err and "pass another --output" in err, err
    assert mine.read_text() == '{"my": "results"}'
    _read_only(monkeypatch := pytest.MonkeyPatch(), tmp_path / "ro")
    try:
        (tmp_path / "ro").mkdir()
        err = _refused(["--output", str(tmp_path / "ro" / "bench.json")], capsys, bench.main)
        assert "--output" in err and "not writable" in err, err
    finally:
        monkeypatch.undo()
    assert bench.is_bench_output(bench.write_rows([{"workload": "total"}], tmp_path / "b.json"))


# ================================================================ the bench's arguments

@pytest.mark.parametrize("value", ["0", "-1", "1e9", "two", ""])
def test_bench_bad_windows_exit_2_with_the_usage_line(value, capsys, monkeypatch, no_model_load):
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "abc")          # not read by the bench
    err = _refused(["--windows", value], capsys, bench.main)
    assert "--windows" in err and "NORMLIMITS_WINDOWS" not in err, err


@pytest.mark.parametrize("args", [["--length", "0"], ["--length", "1"], ["--length", "x"]])
def test_bench_bad_length_exits_2(args, capsys, no_model_load, tmp_path):
    err = _refused([*args, "--output", str(tmp_path / "b.json")], capsys, bench.main)
    assert "--length" in err, err


def test_bench_too_many_windows_name_the_option_with_a_remedy_that_works(model_folder, tmp_path,
                                                                        capsys, monkeypatch):
    short = tmp_path / "short.txt"
    short.write_text("A short text of a few words. " * 20)
    monkeypatch.setenv("NORMLIMITS_CORPUS", str(short))
    err = _refused(["--model", str(model_folder), "--windows", "1000000000", "--length", "64",
                    "--output", str(tmp_path / "b.json")], capsys, bench.main)
    assert "--windows 1000000000" in err and "Pass --windows 9 or fewer" in err, err
    assert "NORMLIMITS_WINDOWS" not in err, err
    err = _refused(["--model", str(model_folder), "--length", "4096",
                    "--output", str(tmp_path / "b.json")], capsys, bench.main)
    assert "--length 4096" in err and "pass --length 128 or less" in err, err
    assert not (tmp_path / "b.json").exists()


# ================================================================ the ledger folder

def test_a_ledger_dir_that_is_a_file_is_named_when_the_chapter_starts(tmp_path, monkeypatch):
    import normlimits.book.chapter as book
    from normlimits.claims import ledger

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv(ledger.LEDGER_ENV, str(blocker))

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the ledger folder was checked")

    monkeypatch.setattr(book, "load_model", refuse)
    with pytest.raises(SettingError, match=r"NORMLIMITS_LEDGER_DIR=.*a-file.* is a file, not a "
                                           r"folder.*set NORMLIMITS_LEDGER_DIR to a writable folder"):
        book.start_chapter("vanishing", show=False)
    monkeypatch.setenv(ledger.LEDGER_ENV, str(blocker / "ledger"))
    with pytest.raises(SettingError, match="NORMLIMITS_LEDGER_DIR=.*cannot be created"):
        ledger.writable_ledger_dir()


def test_a_read_only_ledger_dir_is_named(tmp_path, monkeypatch):
    from normlimits.claims import ledger

    folder = tmp_path / "ledger"
    folder.mkdir()
    monkeypatch.setenv(ledger.LEDGER_ENV, str(folder))
    _read_only(monkeypatch, folder)
    with pytest.raises(SettingError, match=r"NORMLIMITS_LEDGER_DIR=.* is not writable.*writable folder"):
        ledger.writable_ledger_dir()


# ================================================================ temperatures and the dtype

@pytest.mark.parametrize("temperature", [1e300, 3.5e38])
def test_a_temperature_too_large_for_float32_is_refused_not_nan(temperature):
    from normlimits.metrics.normalizers import NORMALIZERS, softmax_with_temperature

    logits = torch.tensor([1.0, 2.0, -float("inf")])
    with pytest.raises(ValueError, match=r"too large for float32.*largest finite value"):
        softmax_with_temperature(logits, temperature=temperature)
    for key in ("sparsemax", "ssmax", "softmax1"):
        with pytest.raises(ValueError, match=r"temperature T = .* too large for float32"):
            NORMALIZERS[key].at_temperature(logits, temperature)
    wide = softmax_with_temperature(logits.double(), temperature=temperature)    # fine in float64
    assert torch.allclose(wide, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))


def test_capture_weights_refuse_a_temperature_too_large_for_their_dtype(tiny_loaded):
    from normlimits.model.capture import capture_window

    cap = capture_window(tiny_loaded, torch.arange(32))
    with pytest.raises(ValueError, match="too large for float32"):
        cap.weights(torch.arange(8), temperature=3.5e38)
    assert torch.isfinite(cap.weights(torch.arange(8), temperature=3e38)).all()


def test_a_temperature_too_small_for_the_dtype_is_refused_in_the_normalisers():
    from normlimits.metrics.normalizers import NORMALIZERS

    with pytest.raises(ValueError, match=r"too small for float32.*smallest normal"):
        NORMALIZERS["sparsemax"].at_temperature(torch.tensor([1.0, 2.0]), 1e-45)


# ================================================================ corpus messages name the source

def test_an_empty_or_blank_corpus_gets_a_remedy(tmp_path):
    from normlimits.model.corpus import CorpusError, load_corpus

    for name, text in (("empty.txt", ""), ("blank.txt", " \n\t\n  ")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(CorpusError, match=r"NORMLIMITS_CORPUS=.*(is empty|only white space).*"
                                              r"Point NORMLIMITS_CORPUS at a UTF-8 text"):
            load_corpus(str(path))
        with pytest.raises(CorpusError, match=r"--corpus .*Pass --corpus with a UTF-8 text") as info:
            load_corpus(str(path), origin="--corpus")
        assert "NORMLIMITS_CORPUS" not in str(info.value)


def test_a_folder_given_as_the_corpus_is_named_as_a_folder(tmp_path, model_folder, capsys):
    from normlimits.model.corpus import CorpusError, load_corpus

    with pytest.raises(CorpusError, match=r"NORMLIMITS_CORPUS=.* is a folder, not a text file"):
        load_corpus(str(tmp_path))
    err = _refused(_argv(model_folder, tmp_path / "out", "--corpus", str(tmp_path)), capsys)
    err = err.split("error:")[-1]
    assert "--corpus" in err and "is a folder" in err and "NORMLIMITS_CORPUS" not in err, err


def test_the_audit_names_the_setting_when_the_corpus_came_from_it(model_folder, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CORPUS", str(tmp_path / "missing.txt"))
    err = _refused(_argv(model_folder, tmp_path / "out"), capsys).split("error:")[-1]
    assert "NORMLIMITS_CORPUS=" in err and "no such file" in err and "--corpus" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_too_short_corpus_from_the_option_names_the_option(model_folder, tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("Too short.")
    err = _refused(_argv(model_folder, tmp_path / "out", "--corpus", str(short)), capsys)
    err = err.split("error:")[-1]
    assert "pass --corpus with a longer text" in err and "NORMLIMITS_CORPUS" not in err, err


# ================================================================ the Jacobian checks' messages

def test_the_jacobian_checks_name_the_offending_value_and_a_remedy():
    from normlimits.metrics.jacobian import softmax_jacobian_row_norms as softmax_jacobian

    with pytest.raises(ValueError, match=r"1 of 3 entries are not, the first -0.1 at index \(0, 1\)"
                                         r".*Pass attention weights"):
        softmax_jacobian(torch.tensor([[0.5, -0.1, 0.6]]))
    with pytest.raises(ValueError, match=r"the first nan at index \(1, 0\)"):
        softmax_jacobian(torch.tensor([[0.5, 0.5], [float("nan"), 1.0]]))
    with pytest.raises(ValueError, match=r"1 of 2 rows sum to 0, the first at index \(1,\)"
                                         r".*Drop the rows with no visible key"):
        softmax_jacobian(torch.tensor([[0.5, 0.5], [0.0, 0.0]]))


# ================================================================ files readable as the umask says

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_outputs_and_cache_files_follow_the_umask_not_0600(model_folder, tmp_path, umask_022):
    from normlimits.core.cache import atomic_save_dir, atomic_write_bytes

    out = tmp_path / "out"
    assert audit.main(_argv(model_folder, out)) == 0
    assert out.stat().st_mode & 0o777 == 0o755
    assert {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()} == {
        p.name: 0o644 for p in out.iterdir()}
    assert atomic_write_bytes(tmp_path / "f.bin", b"x").stat().st_mode & 0o777 == 0o644
    folder = atomic_save_dir(tmp_path / "d", lambda d: (d / "x").write_text("x"))
    assert folder.stat().st_mode & 0o777 == 0o755
    rows = bench.write_rows([{"workload": "total"}], tmp_path / "bench.json")
    assert rows.stat().st_mode & 0o777 == 0o644


def test_faults_json_never_overwrites_a_file_it_did_not_write(tmp_path, capsys):
    from normlimits.dev import faults

    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}')
    err = _refused(["--json", str(mine)], capsys, faults.main)
    assert "--json" in err and "not an earlier output" in err, err
    assert mine.read_text() == '{"mine": true}'
    err = _refused(["--json", str(tmp_path)], capsys, faults.main)
    assert "--json" in err and "is a folder" in err, err
