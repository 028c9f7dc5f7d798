"""The whole book's projected time (normlimits.experiments.book_projection): a line per chapter through two
measured builds."""

import pytest

from normlimits.experiments import book_projection as BP

SMALL = BP.BuildRecord("small", bench_seconds=10.0, chapters={"a": 20.0, "b": 5.0, "c": 30.0}, note="")
LARGE = BP.BuildRecord("large", bench_seconds=60.0, chapters={"a": 120.0, "b": 5.0, "c": 25.0}, note="")


def test_the_projection_is_exact_at_both_builds_and_linear_between():
    for build in (SMALL, LARGE):
        projected = BP.project(build.bench_seconds, (SMALL, LARGE))
        assert projected["a"] == pytest.approx(build.chapters["a"])
        assert projected["b"] == pytest.approx(5.0)
    mid = BP.project(35.0, (LARGE, SMALL))            # order of the records does not matter
    assert mid["a"] == pytest.approx(70.0)
    assert mid["total"] == pytest.approx(sum(v for k, v in mid.items() if k != "total"))


def test_a_chapter_faster_on_the_larger_model_is_held_at_its_larger_time():
    lines = BP.chapter_lines((SMALL, LARGE))
    assert lines["c"] == (30.0, 0.0)
    assert BP.project(1000.0, (SMALL, LARGE))["c"] == 30.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="bench_seconds"):
        BP.project(0.0, (SMALL, LARGE))
    with pytest.raises(ValueError, match="different bench times"):
        BP.chapter_lines((SMALL, SMALL))


def test_the_recorded_calibration_is_consistent():
    small, large = sorted(BP.CALIBRATION, key=lambda b: b.bench_seconds)
    assert small.model == "standin" and large.model == "gpt2-random"
    assert set(small.chapters) == set(large.chapters)
    at_large = BP.project(large.bench_seconds)
    for chapter, seconds in large.chapters.items():   # exact, or held at the larger measured time
        assert at_large[chapter] == pytest.approx(max(seconds, small.chapters[chapter])
                                                  if seconds < small.chapters[chapter] else seconds)
    text = BP.format_projection(BP.project(large.bench_seconds))
    assert "projected" in text and "min" in text


def test_a_chapter_that_grew_faster_than_in_proportion_is_proportional_through_the_larger_build():
    small = BP.BuildRecord("small", bench_seconds=10.0, chapters={"d": 1.0}, note="")
    large = BP.BuildRecord("large", bench_seconds=60.0, chapters={"d": 600.0}, note="")
    fixed, slope = BP.chapter_lines((small, large))["d"]
    assert fixed == 0.0 and slope == pytest.approx(10.0)
    assert BP.project(60.0, (small, large))["d"] == pytest.approx(600.0)
