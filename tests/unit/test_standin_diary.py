"""The stand-in's measurement diary: a consistent record, shown as a table."""

from normlimits.model import standin
from normlimits.model.standin_diary import TRIALS, Trial, diary_table


def test_gains_are_bigram_minus_model_per_band():
    t = Trial("standin", "x", "r", "n", bits=(2.9, 3.0, 3.1), bigram=(3.5, 3.5, 3.4))
    assert t.gains == (0.6, 0.5, 0.3)
    assert Trial("standin", "x", "r", "n").gains is None


def test_exactly_one_trial_is_the_shipped_recipe_and_it_meets_the_band_target():
    kept = [t for t in TRIALS if t.kept]
    assert len(kept) == 1
    assert f"{standin.STANDIN_PHASES[0].steps} steps" in kept[0].recipe
    assert f"{standin.STANDIN_PHASES[1].steps} of" in kept[0].recipe
    assert min(kept[0].gains) > 0.25


def test_diary_table_lists_the_trials_in_order():
    table = diary_table(TRIALS, "standin")
    assert list(table["trial"]) == [t.label for t in TRIALS if t.model == "standin"]
    assert (table["shipped"] == "yes").sum() == 1
    assert diary_table(TRIALS, "no such model").empty


def test_rope_trials_are_recorded_apart_and_the_equal_step_comparison_holds():
    rope = [t for t in TRIALS if t.model == "standin-rope"]
    assert [t.label for t in rope] == list(diary_table(TRIALS, "standin-rope")["trial"])
    assert not any(t.kept for t in rope), "the shipped RoPE recipe's figures come from its cached report"
    only_long = next(t for t in rope if t.label == "1024 only")
    assert only_long.steps == sum(p.steps for p in standin.ROPE_PHASES), \
        "the stand-in page compares the 1024-only run with the shipped recipe at equal steps"
    assert min(only_long.gains) > 0.25, "RoPE leaves the bigram plateau without the short phase"
    short = next(t for t in rope if t.label == "256 only")
    assert short.gains[0] > short.gains[1] > short.gains[2], "RoPE trained at 256 degrades band by band"
    equal = next(t for t in rope if t.label == "equal budget")
    assert equal.steps == sum(p.steps for p in standin.STANDIN_PHASES)
