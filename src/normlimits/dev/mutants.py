"""Mutation score per module, from mutmut's results (``make mutants``; ``python -m normlimits.dev.mutants``).

``make mutants`` runs mutmut 3 (pinned in the Makefile) over the modules that compute the book's
results (``[tool.mutmut] only_mutate`` in ``pyproject.toml``): every mutant is a small change of
the code (``+`` for ``-``, ``<`` for ``<=``, a constant off by one, an argument dropped, ...) and
is run against the fast tests that call the mutated function. A mutant the tests fail on is
*killed*; one they pass on *survived*: either a test is missing, or the mutant computes the same
thing as the original (an *equivalent* mutant, which no test can kill), or the mutated code is
dead.

mutmut writes one ``mutants/<source path>.meta`` JSON file per mutated module (its
``exit_code_by_key`` maps each mutant's name, ``normlimits.metrics.distances.x_distance_profile__mutmut_7``,
to the exit code of its test run) and the mutated source beside it, where each mutant is a
function ``x_<name>__mutmut_<k>`` next to the original ``x_<name>__mutmut_orig``. This module reads
both: the status of each mutant, and the one line it changes, so that a known equivalent mutant is
recognised by *what* it changes (function, original line, mutated line) rather than by its number,
which shifts whenever the function is edited.

Score of a module = (killed + timeout) / (mutants - equivalent - message - not run), where *not
run* are mutants mutmut has not tried yet (``MODULES=`` limited the run, or it was interrupted), and
*message* mutants change only the text of a raised exception (:func:`message_only`; reported in a
column of their own); a mutant of a function that no selected test calls ("no tests") counts as
not killed.

The equivalent mutants, each with the reason no test can tell it from the original, are listed in
:data:`EQUIVALENT`.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: mutmut 3's exit codes (``mutmut.stats.status_by_exit_code``), folded into the statuses reported
STATUS_BY_EXIT_CODE: dict[int | None, str] = {
    1: "killed", 3: "killed",           # a test failed / pytest's internal error
    0: "survived",
    5: "no tests", 33: "no tests",      # no selected test calls the function
    34: "skipped", 37: "killed",        # 37: caught by the type checker (none configured)
    36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout",
    None: "not run", 2: "not run",      # not tried yet / interrupted
}
#: any other exit code (a crash, a signal) is reported as suspicious, as mutmut does
OTHER_STATUS = "suspicious"
STATUSES = ("killed", "timeout", "survived", "no tests", "suspicious", "skipped", "not run")

#: The score the issue sets for the metric modules (share of non-equivalent mutants killed).
GOAL = 0.90

#: Equivalent mutants: ``(module, function, original line, mutated line, reason)``. Lines are
#: compared with their whitespace collapsed; ``function`` is the mutmut name without the module
#: and the ``__mutmut_<k>`` suffix (``x_name`` for a function, ``xǁClassǁname`` for a method).
#: Kinds that recur everywhere are recognised by :data:`EQUIVALENT_KINDS` instead.
EQUIVALENT: list[tuple[str, str, str, str, str]] = [
    # --- normlimits.metrics.distances ---
    ("normlimits.metrics.distances", "x__profile_chunk",
     "key = torch.where(visible, w, torch.full_like(w, -1.0))",
     "key = torch.where(visible, w, torch.full_like(w, -2.0))",
     "the sort key of an invisible key: any negative value ranks it below every (non-negative) weight"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "rank = torch.where(visible, rank, torch.full_like(rank, -1)).transpose(1, 2) # [b, L, r]",
     "rank = torch.where(visible, rank, torch.full_like(rank, -2)).transpose(1, 2) # [b, L, r]",
     "the rank of an invisible key only enters `rank >= grid` (N >= 1): any negative value is never outside"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "s = torch.cumsum(w_s[..., None] * x_top, dim=-2)[..., grid - 1, :] # [b, r, n, d]",
     "s = torch.cumsum(w_s[..., None] * x_top, dim=+2)[..., grid - 1, :] # [b, r, n, d]",
     "the operand is always 4-D [b, r, n_max, d], where dim 2 is dim -2"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "Lf = lens.to(dtype)[:, None] # [r, 1]", "Lf = lens.to(None)[:, None] # [r, 1]",
     "every use of Lf meets gf, already of the floating dtype: type promotion gives the same dtype"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "gf = grid.to(dtype)[None, :] # [1, n]", "gf = grid.to(None)[None, :] # [1, n]",
     "every use of gf meets Lf, already of the floating dtype: type promotion gives the same dtype"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "c = torch.where(Lf > 1, gf / (Lf - 1).clamp_min(1), torch.zeros_like(gf)) # [r, n]",
     "c = torch.where(Lf >= 1, gf / (Lf - 1).clamp_min(1), torch.zeros_like(gf)) # [r, n]",
     "differs only at L = 1, where N = 1 and keep = (L - N)/L = 0 multiplies every term that uses c"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "rest = (Lf - 1).clamp_min(1).t()[None] # [1, 1, r]",
     "rest = (Lf - 1).clamp_min(2).t()[None] # [1, 1, r]",
     "differs only for L <= 2, where factor = N (L-1-N)/(L-2) is 0 for every valid N, so sigma2 is unused"),
    ("normlimits.metrics.distances", "x__sweep", "lens = None", 'lens = ""',
     "initial value, overwritten by the first window; with no window the function raises before reading it"),
    ("normlimits.metrics.distances", "x__sweep", "window = cap.values.shape[-2]", "window = cap.values.shape[+2]",
     "captured values are 4-D [layers, heads, L, d] (the WindowLike contract): dim 2 is dim -2"),
    ("normlimits.metrics.distances", "x__sweep", "longest = int(lens.max())", "longest = None",
     "the truncation to the longest row only saves work: weights beyond a row's keys are 0 and every "
     "statistic masks them"),
    ("normlimits.metrics.distances", "x__sweep",
     "prof = distance_profile(w, v, n_grid, lengths=lens, bounds=bounds, chunk_elements=chunk_elements)",
     "prof = distance_profile(w, v, n_grid, lengths=lens, bounds=bounds, )",
     "chunk size only changes memory use (test_profile_matches_loops checks several chunk sizes)"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "factor = torch.where(Lf - 1 - gf > 0, gf * (Lf - 1 - gf) / (Lf - 2).clamp_min(1),",
     "factor = torch.where(Lf - 1 - gf >= 0, gf * (Lf - 1 - gf) / (Lf - 2).clamp_min(1),",
     "at L - 1 - N = 0 both branches give 0 (the product has the factor L - 1 - N)"),
    ("normlimits.metrics.distances", "x__profile_chunk",
     "n_out = (lens[:, None] - grid[None, :]).to(dtype)[None] # [1, r, n] = L - N",
     "n_out = (lens[:, None] - grid[None, :]).to(None)[None] # [1, r, n] = L - N",
     "n_out only multiplies floating tensors: type promotion gives the same dtype"),
    *[("normlimits.metrics.distances", "x_distance_profile", "width = 2 * n + (2 * n_max if bounds else 0)", after,
       "width only sizes the chunks (memory); the results do not depend on it") for after in (
        "width = 3 * n + (2 * n_max if bounds else 0)",
        "width = 2 * n + (2 * n_max if (bounds) and False else 0)",
        "width = 2 * n + (2 * n_max if (bounds) or True else 0)")],
    *[("normlimits.metrics.distances", "x_distance_profile", before, after,
       "the chunking of the (batch, row) problems: every row is still computed, at worst more than "
       "once, and each row's result does not depend on its chunk; test_profile_matches_loops checks "
       "several chunk sizes") for before, after in (
        ("width = 2 * n + (2 * n_max if bounds else 0)", "width = 2 * n + (3 * n_max if bounds else 0)"),
        ("width = 2 * n + (2 * n_max if bounds else 0)", "width = 2 * n + (2 * n_max if bounds else 1)"),
        ("rows_per_chunk = max(1, chunk_elements // per_problem)",
         "rows_per_chunk = max(2, chunk_elements // per_problem)"),
        ("if rows_per_chunk >= R:", "if rows_per_chunk > R:"),
        ("b_step, r_step = max(1, rows_per_chunk // R), R", "b_step, r_step = max(2, rows_per_chunk // R), R"),
        ("b_step, r_step = 1, rows_per_chunk", "b_step, r_step = 2, rows_per_chunk"),
        ("for b0 in range(0, B, b_step):", "for b0 in range(0, B, ):"),
        ("for r0 in range(0, R, r_step):", "for r0 in range(0, R, ):"),
        *[("bs, rs = slice(b0, b0 + b_step), slice(r0, r0 + r_step)", f"bs, rs = {a}") for a in (
            "slice(None, b0 + b_step), slice(r0, r0 + r_step)", "slice(b0, None), slice(r0, r0 + r_step)",
            "slice(b0 + b_step), slice(r0, r0 + r_step)", "slice(b0, b0 + b_step), slice(None, r0 + r_step)",
            "slice(b0, b0 + b_step), slice(r0, None)", "slice(b0, b0 + b_step), slice(r0 + r_step)")])],
    # --- normlimits.metrics.normalizers ---
    ("normlimits.metrics.normalizers", "x_softpick",
     "small = torch.expm1(z.clamp_max(0.0)) # c = 0: every z <= 0",
     "small = torch.expm1(z.clamp_max(1.0)) # c = 0: every z <= 0",
     "`small` is used only where c = max(z_max, 0) = 0, i.e. where every visible z <= 0: both clamps are no-ops"),
    ("normlimits.metrics.normalizers", "x_softpick",
     "e = torch.where(visible, torch.where(shift > 0, shifted, small), torch.zeros_like(z))",
     "e = torch.where(visible, torch.where(shift >= 0, shifted, small), torch.zeros_like(z))",
     "at shift = 0 every visible z <= 0, so both branches give e <= 0, relu(e) = 0 and a zero row"),
    ("normlimits.metrics.normalizers", "x_softpick",
     "shift = top.clamp_min(0.0).detach()", "shift = top.clamp_min(1.0).detach()",
     "any shift c >= max(z_max, 0) cancels in relu(e^{z-c} - e^{-c}) / sum |e^{z-c} - e^{-c}|; c = 1 for "
     "z_max < 1 changes rounding only"),
    ("normlimits.metrics.normalizers", "x_softpick",
     "return torch.where(den > 0, torch.relu(e) / safe, torch.zeros_like(e))",
     "return torch.where(den >= 0, torch.relu(e) / safe, torch.zeros_like(e))",
     "den = 0 only for a row of e = 0, where relu(e) / safe = 0 / 1 = 0 as well"),
    ("normlimits.metrics.normalizers", "x_self_adjusted_softmax",
     "scale = torch.where(span > 0, (z - low) / safe, torch.zeros_like(z))",
     "scale = torch.where(span >= 0, (z - low) / safe, torch.zeros_like(z))",
     "span = 0 only for an all-zero row, where (z - low) / safe = 0 / 1 = 0 as well"),
    *[("normlimits.metrics.normalizers", "x__ceil_sqrt",
       "k = torch.where((k - 1) ** 2 >= count, k - 1, k) # guard float round-off both ways",
       f"k = torch.where({a}) # guard float round-off both ways",
       "the downward guard acts only if float64 sqrt rounds up past an integer, which the correctly rounded "
       "sqrt never does; when the mutant lowers k wrongly, the upward guard below restores it") for a in (
        "(k - 1) * 2 >= count, k - 1, k", "(k + 1) ** 2 >= count, k - 1, k", "(k - 2) ** 2 >= count, k - 1, k",
        "(k - 1) ** 3 >= count, k - 1, k", "(k - 1) ** 2 > count, k - 1, k", "(k - 1) ** 2 >= count, k + 1, k",
        "(k - 1) ** 2 >= count, k - 2, k")],
    *[("normlimits.metrics.normalizers", "x__ceil_log2", "k = torch.where(2.0 ** (k - 1) >= count, k - 1, k)",
       f"k = torch.where({a})",
       "the downward guard acts only if float64 log2 rounds up past an integer (not for exact powers of 2, "
       "nor below them); when the mutant lowers k wrongly, the upward guard below restores it") for a in (
        "2.0 * (k - 1) >= count, k - 1, k", "3.0 ** (k - 1) >= count, k - 1, k", "2.0 ** (k + 1) >= count, k - 1, k",
        "2.0 ** (k - 2) >= count, k - 1, k", "2.0 ** (k - 1) > count, k - 1, k", "2.0 ** (k - 1) >= count, k + 1, k",
        "2.0 ** (k - 1) >= count, k - 2, k")],
    *[("normlimits.metrics.normalizers", function, "count = visible_count(logits, dim, n, visible)",
       f"count = visible_count(logits, dim, n, {a})",
       "`visible` only saves visible_count from recomputing the same mask") for function in (
        "x_sigmoid_attention", "x_topk_softmax") for a in ("None", "")],
    *[("normlimits.metrics.normalizers", "x_asentmax",
       "c = asentmax_scale(visible_count(logits, dim, n, visible), beta, delta, gamma)",
       f"c = asentmax_scale(visible_count(logits, dim, n, {a}), beta, delta, gamma)",
       "`visible` only saves visible_count from recomputing the same mask") for a in ("None", "")],
    ("normlimits.metrics.normalizers", "x_topk_softmax", "k = topk_size(count, rule).to(logits.dtype)",
     "k = topk_size(count, rule).to(None)",
     "k holds small integers, exact in float64 as in the logits' dtype; it is only compared with places"),
    ("normlimits.metrics.normalizers", "x_topk_softmax",
     "places = torch.arange(order.shape[-1], device=logits.device, dtype=logits.dtype)",
     "places = torch.arange(order.shape[-1], device=logits.device, dtype=None)",
     "places holds small integers, only compared with k: an integer arange compares the same"),
    ("normlimits.metrics.normalizers", "x_topk_softmax",
     "places = torch.arange(order.shape[-1], device=logits.device, dtype=logits.dtype)",
     "places = torch.arange(order.shape[-1], device=logits.device, )",
     "places holds small integers, only compared with k: an integer arange compares the same"),
    # --- normlimits.metrics.separability ---
    ("normlimits.metrics.separability", "x_screen_margin", "if (dim + 2) * FLOAT32_UNIT >= 0.01:",
     "if (dim + 2) * FLOAT32_UNIT > 0.01:",
     "(d + 2) 2^-24 is dyadic and 0.01 is not: they are never equal"),
    *[("normlimits.metrics.separability", "x_min_pairwise_distance", before, after,
       "a choice of the screen that keeps its margin valid (a wider candidate set, a float64 screen where "
       "float32 would do, a mixed float32/float64 product that promotes to float64, a 2-D or symmetric axis "
       "that is the same axis, chunks of pairs that overlap): the float64 recheck of the candidates makes "
       "the result exact either way, because the closest pair stays strictly below the threshold")
      for before, after in (
        *[('if torch.get_float32_matmul_precision() != "highest" or float(norms2.max()) > 1e30:', a) for a in (
            'if torch.get_float32_matmul_precision() == "highest" or float(norms2.max()) > 1e30:',
            'if torch.get_float32_matmul_precision() != "XXhighestXX" or float(norms2.max()) > 1e30:',
            'if torch.get_float32_matmul_precision() != "HIGHEST" or float(norms2.max()) > 1e30:',
            'if torch.get_float32_matmul_precision() != "highest" or float(norms2.max()) >= 1e30:')],
        *[("c = screen_margin(dim) if screen_dtype == torch.float32 else 1e-13 * (dim + 10)", a) for a in (
            "c = screen_margin(dim) if (screen_dtype == torch.float32) or True else 1e-13 * (dim + 10)",
            "c = screen_margin(dim) if screen_dtype == torch.float32 else 1e-13 / (dim + 10)",
            "c = screen_margin(dim) if screen_dtype == torch.float32 else 1.0000000000001 * (dim + 10)",
            "c = screen_margin(dim) if screen_dtype == torch.float32 else 1e-13 * (dim + 11)")],
        ("xs, n_s = x.to(screen_dtype), norms2.to(screen_dtype)[..., None]",
         "xs, n_s = x.to(None), norms2.to(screen_dtype)[..., None]"),
        ("xs, n_s = x.to(screen_dtype), norms2.to(screen_dtype)[..., None]",
         "xs, n_s = x.to(screen_dtype), norms2.to(None)[..., None]"),
        ("screen_dtype = torch.float32", "screen_dtype = None"),
        ("screen_dtype = torch.float64 # reduced-precision products or float32 overflow void the bound",
         "screen_dtype = None # reduced-precision products or float32 overflow void the bound"),
        *[("threshold = row_min.amin(-1).double() + 4.0 * c * norms2.amax(-1) # screened min + 2 E",
           f"threshold = {a} # screened min + 2 E") for a in (
            "row_min.amin(+1).double() + 4.0 * c * norms2.amax(-1)",
            "row_min.amin(-1).double() + 4.0 / c * norms2.amax(-1)",
            "row_min.amin(-1).double() + 5.0 * c * norms2.amax(-1)",
            "row_min.amin(-1).double() + 4.0 * c * norms2.amax(None)",
            "row_min.amin(-1).double() + 4.0 * c * norms2.amax(+1)")],
        ("bound = threshold.to(screen_dtype)", "bound = threshold.to(None)"),
        ('bound = torch.where(bound.double() < threshold, bound.nextafter(torch.full_like(bound, float("inf"))),',
         'bound = torch.where(bound.double() <= threshold, bound.nextafter(torch.full_like(bound, float("inf"))),'),
        ("rb, ri = torch.nonzero(row_min <= bound[:, None], as_tuple=True) # rows holding a candidate",
         "rb, ri = torch.nonzero(row_min < bound[:, None], as_tuple=True) # rows holding a candidate"),
        ("sub, sj = torch.nonzero(d2[hb, hi - i0] <= bound[hb, None], as_tuple=True)",
         "sub, sj = torch.nonzero(d2[hb, hi - i0] < bound[hb, None], as_tuple=True)"),
        *[("sl = slice(start, start + pair_chunk)", f"sl = slice({a})") for a in (
            "None, start + pair_chunk", "start, None", "start + pair_chunk")],
        ("dist = (x[b_idx[sl], i_idx[sl]] - x[b_idx[sl], j_idx[sl]]).norm(dim=-1)",
         "dist = (x[b_idx[sl], i_idx[sl]] - x[b_idx[sl], j_idx[sl]]).norm(dim=+1)"))],
    ("normlimits.metrics.separability", "x_min_pairwise_distance_reference",
     "out = torch.stack([(x[iu[0]] - x[iu[1]]).norm(dim=-1).min() for x in flat])",
     "out = torch.stack([(x[iu[0]] - x[iu[1]]).norm(dim=+1).min() for x in flat])",
     "the differences are 2-D [pairs, d]: dim 1 is dim -1"),
    *[("normlimits.metrics.distances", function, before, after,
       "a list of Python ints, or a full tensor of the int L, is int64 without the dtype too")
      for function, before, after in (
        ("x__prepare", "lens = torch.full((R,), L, dtype=torch.long)", "lens = torch.full((R,), L, dtype=None)"),
        ("x__prepare", "lens = torch.full((R,), L, dtype=torch.long)", "lens = torch.full((R,), L, )"),
        ("x__rows_for", "lens = torch.as_tensor(list(lengths), dtype=torch.long)",
         "lens = torch.as_tensor(list(lengths), dtype=None)"),
        ("x__rows_for", "lens = torch.as_tensor(list(lengths), dtype=torch.long)",
         "lens = torch.as_tensor(list(lengths), )"))],
    *[("normlimits.metrics.distances", "x_sampled_expectation",
       "per = max(1, chunk_elements // (B * R * L * x.shape[-1]))", f"per = max({a})",
       "only the number of samples drawn per chunk changes: the uniform numbers come from the generator in "
       "the same order whatever the chunks (test_sampled_expectation_is_the_mean_... replays them)") for a in (
        "2, chunk_elements // (B * R * L * x.shape[-1])", "1, chunk_elements // (B * R * L * x.shape[+1])",
        "1, chunk_elements // (B * R * L * x.shape[-2])")],
    ("normlimits.metrics.distances", "x_sampled_expectation",
     "d = (diff * (1 - chosen) * visible.to(w.dtype)).sum(-1) # [k, B, R]",
     "d = (diff * (1 - chosen) * visible.to(None)).sum(-1) # [k, B, R]",
     "a boolean mask times a floating tensor promotes to that floating dtype"),
    ("normlimits.metrics.distances", "x_sampled_expectation",
     "u = torch.where(visible, u, torch.full_like(u, 2.0)) # invisible last",
     "u = torch.where(visible, u, torch.full_like(u, 3.0)) # invisible last",
     "any value above 1 puts an invisible key after every uniform draw in [0, 1)"),
    ("normlimits.metrics.distances", "x_sampled_expectation",
     "pick = torch.topk(u, n, dim=-1, largest=False).indices # uniform N-subset",
     "pick = torch.topk(u, n, largest=False).indices # uniform N-subset",
     "topk's default dim is -1"),
]


def _device_free(line: str) -> str:
    line = re.sub(r"\.to\([\w.]+\.device\)", ".to(None)", line)
    line = re.sub(r"device=[\w.]+,?\s*", "", line)
    return re.sub(r"[\s,]+\)", ")", line.replace(" ", ""))


def _chunk_dropped(before: str, after: str) -> bool:
    pattern = r"\b(chunk_elements|block_elements)=\w+"
    return (re.search(pattern, before) is not None and re.search(pattern, after) is None
            and re.sub(r"[\s,]+\)", ")", re.sub(pattern, "", before).replace(" ", ""))
            == re.sub(r"[\s,]+\)", ")", after.replace(" ", "")))


def _literals_lowered(line: str) -> str:
    return re.sub(r'(einsum\(|float\()"([^"]*)"', lambda m: f'{m[1]}"{m[2].lower()}"', line)


#: Kinds of equivalent mutants recognised by what they change: ``(name, test(before, after), reason)``.
EQUIVALENT_KINDS = [
    ("device", lambda b, a: b != a and _device_free(b) == _device_free(a),
     "changes only the device a tensor is made on (device=... dropped or None): the same on CPU, "
     "where the tests run; the cuda-marked tests compare devices where a GPU exists"),
    ("case", lambda b, a: b != a and _literals_lowered(b) == _literals_lowered(a),
     "upper-cases an einsum subscript string or a float('nan'/'inf') literal: both are case-insensitive"),
    ("chunk", _chunk_dropped,
     "drops a chunk_elements / block_elements argument: the default chunk size only changes memory use"),
]


def status_of(exit_code: int | None) -> str:
    """The report's status for one of mutmut's exit codes."""
    return STATUS_BY_EXIT_CODE.get(exit_code, OTHER_STATUS)


def module_of(meta: Path, root: Path) -> str:
    """``mutants/src/normlimits/metrics/distances.py.meta`` -> ``normlimits.metrics.distances``."""
    parts = meta.relative_to(root).with_suffix("").with_suffix("").parts
    if parts and parts[0] in ("src", "source", "lib"):
        parts = parts[1:]
    return ".".join(parts)


_MUTANT = re.compile(r"^(?P<module>.+?)\.(?P<function>xǁ.+|x_.+)__mutmut_(?P<k>\d+)$")


def split_name(mutant: str) -> tuple[str, str, int]:
    """``normlimits.metrics.distances.x_f__mutmut_7`` -> ``("normlimits.metrics.distances", "x_f", 7)``."""
    match = _MUTANT.match(mutant)
    if match is None:
        raise ValueError(f"not a mutmut 3 mutant name: {mutant!r} (expected <module>.x_<function>__mutmut_<k>)")
    return match["module"], match["function"], int(match["k"])


def _squash(line: str) -> str:
    return " ".join(line.split())


def function_sources(source: str) -> dict[str, tuple[list[str], str]]:
    """Every function of mutmut's mutated source: its body lines (the ``def`` dropped) and the
    dump of its body with each ``raise`` statement's message blanked out (see
    :func:`message_only`)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
            body = [_BlankRaise().visit(ast.parse(ast.unparse(stmt))) for stmt in node.body]
            out[node.name] = (lines[node.body[0].lineno - 1:node.end_lineno],
                              "\n".join(ast.dump(b) for b in body))
    return out


class _BlankRaise(ast.NodeTransformer):
    def visit_Raise(self, node: ast.Raise) -> ast.Raise:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return ast.Raise(exc=exc, cause=None)


def message_only(original_dump: str, mutant_dump: str) -> bool:
    """True when a mutant changes nothing but the text of a raised exception (``"XXmsgXX"``,
    ``ValueError(None)``): the two bodies are equal once every ``raise`` keeps only its exception
    class. Such *message mutants* are counted apart and left out of the score: no result of the
    book depends on an error's wording (the tests check the key phrases they rely on)."""
    return original_dump == mutant_dump


def changed_lines(original: list[str], mutant: list[str]) -> tuple[str, str]:
    """The lines a mutant changes, ``(original, mutated)``, each joined and whitespace-collapsed."""
    before, after = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=original, b=mutant, autojunk=False).get_opcodes():
        if tag != "equal":
            before += original[i1:i2]
            after += mutant[j1:j2]
    return _squash(" ".join(before)), _squash(" ".join(after))


@dataclass
class Mutant:
    name: str
    module: str
    function: str
    status: str
    before: str = ""
    after: str = ""
    equivalent: str = ""          # the reason, when listed in EQUIVALENT
    message: bool = False         # changes only the text of a raised exception


@dataclass
class ModuleScore:
    module: str
    counts: Counter = field(default_factory=Counter)

    @property
    def detected(self) -> int:
        return self.counts["killed"] + self.counts["timeout"]

    @property
    def scored(self) -> int:
        """Mutants that count: all that ran, less the equivalent ones."""
        return sum(self.counts[s] for s in STATUSES if s not in ("not run", "skipped"))

    @property
    def score(self) -> float | None:
        return self.detected / self.scored if self.scored else None


def equivalence_reason(mutant: Mutant, equivalent=None) -> str:
    """The listed reason if ``mutant`` is a known equivalent mutant, else ``""``."""
    for module, function, before, after, reason in (EQUIVALENT if equivalent is None else equivalent):
        if (module, function) == (mutant.module, mutant.function) and \
                (_squash(before), _squash(after)) == (mutant.before, mutant.after):
            return reason
    for name, test, reason in EQUIVALENT_KINDS:
        if mutant.before and test(mutant.before, mutant.after):
            return f"{name}: {reason}"
    return ""


def read_results(root: Path | str = "mutants", modules: list[str] | None = None,
                 equivalent=None) -> list[Mutant]:
    """Every mutant of mutmut's ``root`` folder (optionally only ``modules``), with its status,
    the line it changes and, for a listed equivalent mutant, the reason."""
    root = Path(root)
    metas = sorted(root.rglob("*.py.meta"))
    if not metas:
        raise FileNotFoundError(f"no mutmut results under {root}/: run `make mutants` first")
    found = []
    for meta in metas:
        module = module_of(meta, root)
        if modules and not any(module == m or module.endswith("." + m) for m in modules):
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        source_file = meta.with_suffix("")
        functions = function_sources(source_file.read_text()) if source_file.is_file() else {}
        for name, code in codes.items():
            _, function, k = split_name(name)
            mutant = Mutant(name=name, module=module, function=function, status=status_of(code))
            orig, mutated = functions.get(f"{function}__mutmut_orig"), functions.get(f"{function}__mutmut_{k}")
            if orig is not None and mutated is not None:
                mutant.before, mutant.after = changed_lines(orig[0], mutated[0])
                mutant.message = message_only(orig[1], mutated[1])
            mutant.equivalent = equivalence_reason(mutant, equivalent)
            found.append(mutant)
    return found


def scores(mutants: list[Mutant]) -> dict[str, ModuleScore]:
    """Counts per module and status; a listed equivalent mutant counts as ``equivalent``, not as
    a survivor (one that was killed after all stays killed: the list is then wrong, and
    :func:`main` says so)."""
    table: dict[str, ModuleScore] = {}
    for m in mutants:
        row = table.setdefault(m.module, ModuleScore(m.module))
        if m.message:
            row.counts["message"] += 1
            row.counts["message killed"] += m.status in ("killed", "timeout")
        elif m.equivalent and m.status in ("survived", "no tests"):
            row.counts["equivalent"] += 1
        else:
            row.counts[m.status] += 1
    return table


def format_table(table: dict[str, ModuleScore]) -> str:
    cols = ("killed", "timeout", "survived", "no tests", "suspicious", "equivalent", "not run")
    lines = [f"{'module':<30}" + "".join(f"{c:>11}" for c in cols) + f"{'score':>8}{'messages killed':>17}"]
    total = ModuleScore("all")
    for module in sorted(table):
        row = table[module]
        total.counts.update(row.counts)
        score = "-" if row.score is None else f"{row.score:.1%}"
        lines.append(f"{module:<30}" + "".join(f"{row.counts[c]:>11}" for c in cols) + f"{score:>8}"
                     + f"{row.counts['message killed']:>11}/{row.counts['message']:<5}")
    score = "-" if total.score is None else f"{total.score:.1%}"
    lines.append(f"{'all':<30}" + "".join(f"{total.counts[c]:>11}" for c in cols) + f"{score:>8}"
                 + f"{total.counts['message killed']:>11}/{total.counts['message']:<5}")
    lines.append("score = (killed + timeout) / (killed + timeout + survived + no tests + suspicious); "
                 "equivalent mutants, mutants not run, and mutants that change only an error's "
                 "message (last column: killed / all) are left out")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normlimits.dev.mutants", description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to report (default: every mutated module)")
    parser.add_argument("--root", default="mutants", help="mutmut's working folder (default: mutants)")
    parser.add_argument("--survivors", action="store_true", help="list each surviving mutant and its change")
    parser.add_argument("--names", action="store_true",
                        help="print only the names of the mutants that survived (not listed as equivalent), "
                             "to re-run them after adding tests: mutmut run $(python -m normlimits.dev.mutants --names)")
    parser.add_argument("--fail-under", type=float, default=None,
                        help="exit 1 if a module's score is below this fraction (e.g. 0.9)")
    args = parser.parse_args(argv)
    try:
        mutants = read_results(args.root, args.modules or None)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    if args.names:
        print(" ".join(m.name for m in mutants if m.status in ("survived", "no tests", "suspicious")
                       and not m.equivalent and not m.message))
        return 0
    table = scores(mutants)
    print(format_table(table))
    stale = [m for m in mutants if m.equivalent and m.status in ("killed", "timeout")]
    for m in stale:
        print(f"listed as equivalent but killed (fix EQUIVALENT): {m.name}: {m.before!r} -> {m.after!r}")
    if args.survivors:
        for m in mutants:
            if m.status in ("survived", "no tests", "suspicious") and not m.equivalent and not m.message:
                print(f"{m.status:>9}  {m.name}\n           - {m.before}\n           + {m.after}")
    low = [r.module for r in table.values() if args.fail_under is not None and r.score is not None
           and r.score < args.fail_under]
    if low:
        print(f"score below {args.fail_under:.0%}: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
