"""Grading rules: how a measured statistic becomes a verdict, stated before the data are seen.

A :class:`Rule` is a list of :class:`Criterion` (a named statistic, a comparison and a threshold)
and an ordered list of outcomes ``(condition, verdict)``; the first outcome whose condition holds
gives the verdict. Conditions are a small language over the criteria's pass/fail results:

- ``all`` / ``any``: every / at least one criterion passes;
- ``all:a,b`` / ``any:a,b`` / ``none:a,b``: the named criteria all pass / one passes / all fail;
- ``else``: always (the last outcome must be ``else``).

A criterion whose value is missing (``None`` or NaN) cannot be graded: the verdict is then
``not testable`` whatever the outcomes say, and the row must carry the reason. So is a claim
whose *scope* criterion fails (kind ``scope``: the data lie outside the range where the claim
applies, e.g. no row reaches the regime where an asymptotic bound binds): the row then says which
scope criterion failed.

A measured criterion may carry an interval (a bootstrap interval over corpus windows, seeds or
draws: :mod:`normlimits.core.bootstrap`). It then holds only when its whole interval meets the test,
fails only when its whole interval fails it, and is *undecided* when the interval straddles the
threshold. A verdict that an undecided criterion could change (some pass/fail assignment of the
undecided criteria gives another verdict) is ``inconclusive``; one that every assignment gives
stands. Identities take no interval.

A criterion of kind ``proven`` checks a statement the book proves (a bound of its chapter, in the
form proven there): it cannot grade the claim, because a breach is a bug, so grading raises
:class:`ProvenStatementError` naming it and the build stops. It passes on every correct build and
takes no interval.

The rule is serialised into every ledger row (:meth:`Rule.to_row`), so a reader can re-grade
``_build/ledger.json`` without running the book (:func:`regrade`).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Mapping

__all__ = ["ProvenStatementError", "VERDICTS", "VERDICT_DEFINITIONS", "OUTCOME_VERDICTS", "DECISIONS", "OPS", "KINDS", "Criterion", "Rule",
           "regrade", "plain_text", "describe_condition", "describe_outcomes"]

#: confirmed: the claim holds as stated (on the range measured); corrected: a true statement
#: close to the claim is proven here, the data meet it, and it replaces the claim; partial: the
#: claim's main feature holds on the data while a number or a further part it states does not,
#: and no proven statement repairs it (schema 4.0); refuted: the evidence contradicts it;
#: not reproduced: the paper's number or figure did not come out under any reading tried, without
#: the claim being shown false; not testable: this build cannot measure it, or the data lie outside
#: the claim's scope (the row says why); inconclusive: the verdict turns on a criterion whose
#: interval contains its threshold.
VERDICTS = ("confirmed", "corrected", "partial", "refuted", "not reproduced", "inconclusive",
            "not testable")
#: every verdict in a sentence, for the one legend a reader sees (the Verdicts page, before the
#: tables); MyST-like text (``$math$``) for :func:`normlimits.core.markup.inline_html`
VERDICT_DEFINITIONS = {
    "confirmed": "the claim holds as stated, on the range measured.",
    "corrected": ("the claim as stated fails or is not a valid statement, a true statement close "
                  "to it is proven in its chapter, the data meet that statement, and it replaces "
                  "the claim (a repair the book proves)."),
    "partial": ("the claim's main feature holds on the data while a number or a further part it "
                "states does not, and no proven statement repairs it (a partial hold, counted "
                "apart from a proven repair)."),
    "refuted": ("the evidence contradicts the claim (for a claim about GPT-2's own measurements, "
                "only data of GPT-2 124M can)."),
    "not reproduced": ("the paper's number or figure did not come out under any reading tried, "
                       "without the claim being shown false; a claim about GPT-2's own "
                       "measurements that fails on another model gets this verdict, never "
                       "\"refuted\"."),
    "inconclusive": ("the verdict turns on a criterion whose interval (over windows, seeds or "
                     "draws) contains its threshold, so the data do not decide between the "
                     "verdicts it could give."),
    "not testable": ("this build cannot grade the claim: a value could not be measured, or the "
                     "data lie outside the claim's scope (a scope criterion fails, e.g. no row "
                     "reaches the regime where an asymptotic claim binds); the row says why."),
}
#: verdicts the rules' outcomes may name (the others follow from missing values, failed scope
#: criteria or intervals)
OUTCOME_VERDICTS = ("confirmed", "corrected", "partial", "refuted", "not reproduced")
#: a criterion's decision under its interval
DECISIONS = ("pass", "fail", "undecided")
OPS = ("<=", "<", ">=", ">", "==", "between", "outside")
#: measurement: a number from data that could have come out otherwise, and which other data (other
#: windows, seeds, draws) could move: it takes an interval; identity: a value fixed by construction
#: (an empty sum, a derivation closing), shown but never enough for a verdict alone; check: an
#: extreme or a count of violations over everything measured (of a proven inequality, or of a
#: computation against its exact value), which one counterexample decides: no resample makes it
#: more certain, so it takes no interval (schema 3.0); scope: a measurement that says whether the
#: data lie where the claim applies (e.g. the share of rows in the regime where an asymptotic
#: claim binds): when it fails the verdict is "not testable" whatever the outcomes say, and when
#: its interval straddles its threshold a verdict it could change is inconclusive (schema 4.0)
KINDS = ("measurement", "identity", "check", "scope", "proven")
_OP_WORDS = {"<=": "≤", "<": "<", ">=": "≥", ">": ">", "==": "=", "between": "in", "outside": "outside"}


class ProvenStatementError(AssertionError):
    """A criterion of kind ``proven`` failed: a statement the book proves was measured broken.

    That is a fault of the implementation (an estimator, a closed form, a tolerance), never
    evidence about the paper, so it stops the build with the criterion named instead of grading
    the claim (issue 47: a proven statement is a check on the implementation, not a verdict).
    """


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True)
class Criterion:
    """One test of a rule: ``value <op> threshold``.

    ``key`` names it in outcomes; ``statistic`` says in words (MyST, ``$math$`` allowed) what is
    measured; ``threshold`` is a number, or ``(low, high)`` for ``between``/``outside`` (both
    ends inclusive for ``between``).
    """

    key: str
    statistic: str
    op: str
    threshold: float | tuple[float, float]
    kind: str = "measurement"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", self.key):
            raise ValueError(f"criterion key {self.key!r} must be an identifier")
        if self.op not in OPS:
            raise ValueError(f"criterion {self.key!r}: op {self.op!r} is not one of {OPS}")
        if self.kind not in KINDS:
            raise ValueError(f"criterion {self.key!r}: kind {self.kind!r} is not one of {KINDS}")
        interval = self.op in ("between", "outside")
        if interval != isinstance(self.threshold, (tuple, list)):
            raise ValueError(f"criterion {self.key!r}: op {self.op!r} needs "
                             f"{'a (low, high) pair' if interval else 'one number'} as threshold")
        if interval:
            low, high = self.threshold
            if not low <= high:
                raise ValueError(f"criterion {self.key!r}: threshold {self.threshold} has low > high")
            object.__setattr__(self, "threshold", (float(low), float(high)))
        else:
            object.__setattr__(self, "threshold", float(self.threshold))

    def passes(self, value) -> bool | None:
        """Whether ``value`` meets the criterion (None when the value is missing)."""
        if _missing(value):
            return None
        v, t = float(value), self.threshold
        return {"<=": lambda: v <= t, "<": lambda: v < t, ">=": lambda: v >= t, ">": lambda: v > t,
                "==": lambda: v == t,
                "between": lambda: t[0] <= v <= t[1],
                "outside": lambda: not (t[0] <= v <= t[1])}[self.op]()

    def decide(self, interval) -> str:
        """``"pass"`` when every value of ``interval`` (a ``(low, high)`` pair or a
        :class:`normlimits.core.bootstrap.Interval`) meets the test, ``"fail"`` when none does,
        ``"undecided"`` when it straddles the threshold."""
        low, high = _bounds(interval)
        if not low <= high:
            raise ValueError(f"criterion {self.key!r}: interval [{low}, {high}] must have low <= "
                             "high, both numbers")
        t = self.threshold
        if self.op in ("between", "outside"):
            inside = t[0] <= low and high <= t[1]
            apart = high < t[0] or low > t[1]
            holds, breaks = (inside, apart) if self.op == "between" else (apart, inside)
        elif self.op == "==":
            holds, breaks = low == high == t, not (low <= t <= high)
        else:
            holds, breaks = self.passes(low) and self.passes(high), not (self.passes(low) or self.passes(high))
        return "pass" if holds else "fail" if breaks else "undecided"

    @classmethod
    def from_dict(cls, c: Mapping) -> "Criterion":
        """The criterion recorded in a ledger row's ``criteria`` entry."""
        threshold = c["threshold"]
        return cls(c["key"], c["statistic"], c["op"],
                   tuple(threshold) if isinstance(threshold, list) else threshold,
                   c.get("kind", "measurement"))

    def describe(self) -> str:
        """The test in words, e.g. ``≤ 0.25`` or ``in [0.8, 1.2]``."""
        t = self.threshold
        if isinstance(t, tuple):
            return f"{_OP_WORDS[self.op]} [{t[0]:g}, {t[1]:g}]"
        return f"{_OP_WORDS[self.op]} {t:g}"


@dataclass(frozen=True)
class Rule:
    """A grading rule: criteria, outcomes in order, the headline criterion and the rule in words.

    ``headline`` is the key of the criterion the verdict rests on most (the "one number" the
    Verdicts page shows). ``text`` states the rule for readers (MyST, ``$math$`` allowed).
    """

    criteria: tuple[Criterion, ...]
    outcomes: tuple[tuple[str, str], ...]
    headline: str
    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "criteria", tuple(self.criteria))
        object.__setattr__(self, "outcomes", tuple((c, v) for c, v in self.outcomes))
        keys = [c.key for c in self.criteria]
        if not keys or len(set(keys)) != len(keys):
            raise ValueError(f"a rule needs at least one criterion and unique keys (got {keys})")
        if self.headline not in keys:
            raise ValueError(f"headline {self.headline!r} is not one of the criteria {keys}")
        if not any(c.kind in ("measurement", "check", "proven") for c in self.criteria):
            raise ValueError("a rule must rest on at least one measurement or check, not on identities alone")
        if not self.outcomes or self.outcomes[-1][0] != "else":
            raise ValueError("the last outcome must be ('else', verdict)")
        for condition, verdict in self.outcomes:
            if verdict not in OUTCOME_VERDICTS:
                raise ValueError(f"outcome verdict {verdict!r} must be one of {OUTCOME_VERDICTS} "
                                 "(not testable follows from missing values and inconclusive from "
                                 "intervals, never from outcomes)")
            self._parse(condition, keys)
        if not self.text.strip():
            raise ValueError("a rule needs its statement in words (text)")

    @staticmethod
    def _parse(condition: str, keys: list[str]) -> tuple[str, list[str]]:
        word, _, names = condition.partition(":")
        if word not in ("all", "any", "none", "else"):
            raise ValueError(f"condition {condition!r}: expected all, any, none or else")
        listed = [n.strip() for n in names.split(",") if n.strip()] if names else []
        if word == "else" and listed:
            raise ValueError("'else' takes no criteria")
        if word == "none" and not listed:
            raise ValueError("'none' needs the criteria it negates, e.g. none:a,b")
        unknown = [n for n in listed if n not in keys]
        if unknown:
            raise ValueError(f"condition {condition!r} names unknown criteria {unknown}")
        return word, listed or list(keys)

    def results(self, values: Mapping[str, object]) -> dict[str, bool | None]:
        """Pass (True), fail (False) or missing (None) per criterion."""
        extra = set(values) - {c.key for c in self.criteria}
        if extra:
            raise ValueError(f"values for unknown criteria {sorted(extra)}; the rule has "
                             f"{[c.key for c in self.criteria]}")
        absent = [c.key for c in self.criteria if c.key not in values]
        if absent:
            raise ValueError(f"no value given for criteria {absent} (pass None when the statistic "
                             "cannot be measured, with a reason)")
        results = {c.key: c.passes(values[c.key]) for c in self.criteria}
        broken = [c for c in self.criteria if c.kind == "proven" and results[c.key] is False]
        if broken:
            raise ProvenStatementError("; ".join(
                f"criterion {c.key!r} ({plain_text(c.statistic)}) = {values[c.key]!r} breaks "
                f"{c.op} {c.threshold}" for c in broken)
                + ": this is a statement the book proves, so the breach is a bug in the "
                "implementation (an estimator, a closed form or a tolerance), not a verdict; "
                "find the cell that breaks it and fix the code")
        return results

    def decisions(self, values: Mapping[str, object],
                  intervals: Mapping[str, object] | None = None) -> dict[str, bool | None | str]:
        """Per criterion: True / False (decided), None (missing value) or ``"undecided"`` (its
        interval contains its threshold). A criterion with an interval is decided by the interval
        (:meth:`Criterion.decide`), one without by its value."""
        results: dict[str, bool | None | str] = dict(self.results(values))
        intervals = dict(intervals or {})
        unknown = set(intervals) - set(results)
        if unknown:
            raise ValueError(f"intervals for unknown criteria {sorted(unknown)}")
        for c in self.criteria:
            if c.key not in intervals or results[c.key] is None:
                continue
            if c.kind not in ("measurement", "scope"):
                raise ValueError(f"criterion {c.key!r} is an {c.kind}: it takes no interval")
            decision = c.decide(_bounds(intervals[c.key]))
            results[c.key] = "undecided" if decision == "undecided" else decision == "pass"
        return results

    def _first_outcome(self, results: Mapping[str, bool]) -> str:
        """The verdict of the first outcome whose condition holds. A bare ``all`` / ``any`` speaks
        of the claim's own criteria, not of its scope criteria, which are decided before any
        outcome (:meth:`_verdict`): a passing scope criterion alone never satisfies ``any``."""
        keys = [c.key for c in self.criteria if c.kind != "scope"]
        for condition, verdict in self.outcomes:
            word, names = self._parse(condition, keys)
            got = [results[n] for n in names]
            if (word == "else" or (word == "all" and all(got)) or (word == "any" and any(got))
                    or (word == "none" and not any(got))):
                return verdict
        raise AssertionError("unreachable: the last outcome is 'else'")

    def possible_verdicts(self, values: Mapping[str, object],
                          intervals: Mapping[str, object] | None = None) -> set[str]:
        """The verdicts some pass/fail assignment of the undecided criteria gives (one verdict
        when nothing is undecided; ``{"not testable"}`` when a value is missing)."""
        results = self.decisions(values, intervals)
        if any(r is None for r in results.values()):
            return {"not testable"}
        open_keys = [k for k, r in results.items() if r == "undecided"]
        return {self._verdict({**results, **dict(zip(open_keys, bits))})
                for bits in itertools.product((True, False), repeat=len(open_keys))}

    def _verdict(self, results: Mapping[str, bool]) -> str:
        """The verdict of decided results: "not testable" when a scope criterion fails (the data
        lie outside the claim's scope), else the first outcome whose condition holds."""
        if any(c.kind == "scope" and results[c.key] is False for c in self.criteria):
            return "not testable"
        return self._first_outcome(results)

    def out_of_scope(self, values: Mapping[str, object],
                     intervals: Mapping[str, object] | None = None) -> list[Criterion]:
        """The scope criteria that fail (decided by their interval where they have one): why a
        verdict is "not testable" although every value was measured."""
        results = self.decisions(values, intervals)
        return [c for c in self.criteria if c.kind == "scope" and results[c.key] is False]

    def grade(self, values: Mapping[str, object], intervals: Mapping[str, object] | None = None) -> str:
        """The verdict for ``values`` (one value per criterion key; None or NaN = missing) and,
        optionally, ``intervals`` (criterion key -> ``(low, high)`` or a
        :class:`normlimits.core.bootstrap.Interval`): ``inconclusive`` when an undecided criterion
        could change the verdict."""
        verdicts = self.possible_verdicts(values, intervals)
        return verdicts.pop() if len(verdicts) == 1 else "inconclusive"

    def to_row(self, values: Mapping[str, object], intervals: Mapping[str, object] | None = None) -> dict:
        """The rule and the values as ledger fields (JSON-able), the verdict included; a criterion
        with an interval records it and its ``decision``, and the row the headline's interval."""
        results = self.results(values)
        decided = self.decisions(values, intervals)
        intervals = dict(intervals or {})
        criteria = []
        for c in self.criteria:
            entry = {"key": c.key, "statistic": c.statistic, "statistic_text": plain_text(c.statistic),
                     "op": c.op, "threshold": list(c.threshold) if isinstance(c.threshold, tuple)
                     else c.threshold, "value": None if _missing(values[c.key]) else float(values[c.key]),
                     "passed": results[c.key], "kind": c.kind}
            if c.key in intervals and results[c.key] is not None:
                entry["interval"] = _bounds(intervals[c.key])
                r = decided[c.key]
                entry["decision"] = "undecided" if r == "undecided" else "pass" if r else "fail"
            criteria.append(entry)
        head = criteria[[c.key for c in self.criteria].index(self.headline)]
        row = {"rule": self.text, "rule_text": plain_text(self.text), "criteria": criteria,
               "outcomes": [list(o) for o in self.outcomes], "headline": self.headline,
               "statistic": plain_text(next(c for c in self.criteria if c.key == self.headline).statistic),
               "value": head["value"], "threshold": head["threshold"],
               "verdict": self.grade(values, intervals)}
        if "interval" in head:
            row["interval"] = head["interval"]
        return row

    @classmethod
    def from_row(cls, row: Mapping) -> "Rule":
        """Rebuild the rule recorded in a ledger row."""
        criteria = tuple(Criterion.from_dict(c) for c in row["criteria"])
        return cls(criteria, tuple(tuple(o) for o in row["outcomes"]), row["headline"], row["rule"])


def _bounds(interval) -> list[float]:
    """``[low, high]`` of an interval given as a pair or as an object with ``low``/``high``."""
    if hasattr(interval, "low") and hasattr(interval, "high"):
        return [float(interval.low), float(interval.high)]
    low, high = interval
    return [float(low), float(high)]


def _listed(keys: list[str], joiner: str) -> str:
    quoted = [f"`{k}`" for k in keys]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" {joiner} " + quoted[-1]


def describe_condition(condition: str) -> str:
    """An outcome's condition in words, criterion keys in backticks: ``all`` -> "every criterion
    passes", ``all:a,b`` -> "`a` and `b` pass", ``any:a`` -> "`a` passes", ``none:a,b`` ->
    "`a` and `b` both fail", ``else`` -> "otherwise"."""
    word, _, names = condition.partition(":")
    keys = [n.strip() for n in names.split(",") if n.strip()]
    if word == "else":
        return "otherwise"
    if not keys:
        return {"all": "every criterion passes", "any": "at least one criterion passes"}[word]
    one = len(keys) == 1
    if word == "all":
        return _listed(keys, "and") + (" passes" if one else " pass")
    if word == "any":
        return _listed(keys, "or") + " passes"
    if word == "none":
        return _listed(keys, "and") + (" fails" if one else " both fail" if len(keys) == 2 else " all fail")
    raise ValueError(f"condition {condition!r}: expected all, any, none or else")


def describe_outcomes(outcomes) -> str:
    """A rule's outcomes in words, in order: "confirmed when every criterion passes; corrected
    when `gain` passes; otherwise refuted" (never the internal ``all:gain`` strings)."""
    parts = []
    for condition, verdict in outcomes:
        words = describe_condition(condition)
        parts.append(f"otherwise {verdict}" if condition == "else" else f"{verdict} when {words}")
    return "; ".join(parts)


def row_possible_verdicts(row: Mapping) -> set[str]:
    """The verdicts a ledger row's recorded criteria and intervals leave open: its verdict, or
    for an inconclusive row every verdict its undecided criteria could give
    (:meth:`Rule.possible_verdicts`)."""
    rule = Rule.from_row(row)
    return rule.possible_verdicts({c["key"]: c["value"] for c in row["criteria"]},
                                  {c["key"]: c["interval"] for c in row["criteria"] if "interval" in c})


def regrade(row: Mapping) -> str:
    """Re-grade a ledger row from its recorded criteria, values, intervals and outcomes alone."""
    rule = Rule.from_row(row)
    return rule.grade({c["key"]: c["value"] for c in row["criteria"]},
                      {c["key"]: c["interval"] for c in row["criteria"] if "interval" in c})


_LATEX = [
    (r"\\lVert\s*", "‖"), (r"\s*\\rVert", "‖"), (r"\\Vert", "‖"), (r"\\lvert|\\rvert|\\vert", "|"), (r"\\left|\\right|\\big|\\Big", ""),
    (r"\\alpha", "α"), (r"\\bar\s*\{?α\}?", "ᾱ"), (r"\\Delta", "Δ"), (r"\\delta", "δ"), (r"\\varepsilon|\\epsilon", "ε"),
    (r"\\xi", "ξ"), (r"\\ell", "ℓ"), (r"\\theta", "θ"), (r"\\sigma", "σ"), (r"\\gamma", "γ"), (r"\\tau", "τ"),
    (r"\\mathbb\s*\{?E\}?", "𝔼"), (r"\\tilde\s*\{?d\}?", "d̃"),
    (r"\\tilde\s*\{?(\w)\}?", "\\1\u0303"), (r"\{\\rm\s+([^}]*)\}", r"{\1}"), (r"\\rm\s*", ""),
    (r"\\rho", "ρ"), (r"\\beta", "β"), (r"\\lambda", "λ"), (r"\\mu", "μ"), (r"\\pi", "π"),
    (r"\\Theta", "Θ"), (r"\\mp", "∓"), (r"\\nabla", "∇"), (r"\\sum", "Σ"), (r"\\prod", "Π"),
    (r"\\le(q)?", "≤"), (r"\\ge(q)?", "≥"), (r"\\neq?", "≠"), (r"\\approx", "≈"), (r"\\sim", "~"),
    (r"\\to", "→"), (r"\\infty", "∞"), (r"\\times", "×"), (r"\\cdot", "·"), (r"\\in", "∈"),
    (r"\\notin", "∉"), (r"\\ll", "≪"), (r"\\gg", "≫"), (r"\\pm", "±"), (r"\\sqrt", "√"), (r"\\log", "log"),
    (r"\\exp", "exp"), (r"\\min", "min"), (r"\\max", "max"), (r"\\operatorname\{([^}]*)\}", r"\1"),
    (r"\\mathrm\{([^}]*)\}", r"\1"), (r"\\text\{([^}]*)\}", r"\1"), (r"\\[td]?frac\{([^}]*)\}\{([^}]*)\}", r"(\1)/(\2)"),
    (r"\\[td]?frac(\w)(\w)", r"\1/\2"),
    (r"\\[,;!: ]", " "), (r"\\%", "%"),
]


def plain_text(text: str) -> str:
    """A plain-text twin of MyST text with ``$math$``: LaTeX commands turned into Unicode where
    common (``\\alpha`` -> α, ``\\le`` -> ≤, ...), dollars, braces and emphasis markers removed."""
    def math(match: re.Match) -> str:
        body = match.group(1)
        for pattern, repl in _LATEX:
            body = re.sub(pattern, repl, body)
        body = re.sub(r"\^\{([^}]*)\}", r"^\1", body)
        body = re.sub(r"_\{([^}]*)\}(?=\w)", r"_\1 ", body)
        body = re.sub(r"_\{([^}]*)\}", r"_\1", body)
        return body.replace("{", "").replace("}", "")
    out = re.sub(r"\$([^$]+)\$", math, text)
    out = re.sub(r"\*\*([^*]+)\*\*|\*([^*]+)\*", lambda m: m.group(1) or m.group(2), out)
    return re.sub(r"\s+", " ", out).strip()
