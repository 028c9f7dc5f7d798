"""The one test every derivation closes with: does an expression simplify to exactly zero?"""

from __future__ import annotations

import sympy as sp


def closes(expr) -> bool:
    """True when ``expr`` is exactly zero after simplification (a scalar, or every matrix entry).

    Tried in order of cost: cancelling a rational expression (fast and decisive for the rational
    identities most derivations end in), ``simplify``, then ``simplify`` after ``expand``. False
    means sympy could not close it, not that the identity is false: a chapter then checks it
    numerically and says so.
    """
    if isinstance(expr, sp.MatrixBase):
        return all(closes(entry) for entry in expr)
    expr = sp.sympify(expr)
    if expr == 0 or sp.cancel(sp.together(expr)) == 0:
        return True
    if sp.simplify(expr) == 0:
        return True
    return sp.simplify(sp.expand(expr)) == 0
