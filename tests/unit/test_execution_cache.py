"""The book's execution cache is dropped exactly when the chapters' inputs change."""

from __future__ import annotations

import json

from normlimits.book import execution_cache as ec


def _fake_build(tmp_path):
    build = tmp_path / "_build"
    for name in ec.DERIVED:
        (build / name).mkdir(parents=True, exist_ok=True)
        (build / name / "state").write_text("derived from the old inputs")
    (build / "html").mkdir(exist_ok=True)
    return build


def test_inputs_keep_only_the_settings_that_matter(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("War and Peace")
    env = {"NORMLIMITS_MODEL": "standin", "NORMLIMITS_CORPUS": str(corpus), "HF_HUB_OFFLINE": "1",
           "HOME": "/root", "PATH": "/bin"}
    got = ec.inputs(env)
    assert got["settings"] == {"HF_HUB_OFFLINE": "1", "NORMLIMITS_CORPUS": str(corpus),
                               "NORMLIMITS_MODEL": "standin"}
    assert len(got["package"]) == 64 and len(got["corpus_file"]) == 64
    assert ec.inputs({})["corpus_file"] is None


def test_package_digest_follows_every_source_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    first = ec.package_digest(tmp_path)
    assert ec.package_digest(tmp_path) == first
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert ec.package_digest(tmp_path) != first


def test_cache_kept_while_inputs_stay_and_dropped_when_they_change(tmp_path):
    build = _fake_build(tmp_path)
    before = {"settings": {"NORMLIMITS_WINDOWS": "8"}, "package": "p1"}
    # an existing cache but no record of its inputs: dropped, since nothing says what made it
    reason = ec.refresh(build, before)
    assert reason and "no record" in reason
    assert not any((build / name).exists() for name in ec.DERIVED)
    build = _fake_build(tmp_path)
    assert ec.refresh(build, before) is None
    assert all((build / name / "state").exists() for name in ec.DERIVED)
    after = {"settings": {"NORMLIMITS_WINDOWS": "2"}, "package": "p1"}
    reason = ec.refresh(build, after)
    assert reason is not None and "settings" in reason and "package" not in reason
    assert not any((build / name).exists() for name in ec.DERIVED)
    assert (build / "html").exists()                      # the site itself is left alone
    assert json.loads((build / ec.FINGERPRINT_FILE).read_text()) == after


def test_no_build_yet_is_not_a_change(tmp_path):
    build = tmp_path / "_build"
    assert ec.refresh(build, {"package": "p"}) is None
    assert (build / ec.FINGERPRINT_FILE).is_file()
