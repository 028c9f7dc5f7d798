"""The sympy derivations of Theorem 2 and of the multi-head coverage formula."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch

from normlimits.metrics.separability_mc import sample_sphere
from normlimits.theory import separability as TS


# ----------------------------------------------------------------------- theory: sympy
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_derivation_closes(n):
    der = TS.derive(n)
    assert der.second_closes and der.fourth_closes and der.variance_closes
    assert der.holder_closes and der.sep_closes and der.mcdiarmid_closes


def test_derivation_rejects_bad_n():
    with pytest.raises(ValueError):
        TS.derive(0)


def test_moment_rules_by_monte_carlo():
    """E X^2 = M^2 q and E X^4 = M^4 (q^2 + 2 (q^2 - p)/d): the rules sympy used, checked numerically."""
    gen = torch.Generator().manual_seed(12)
    a = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    for dim, m in ((3, 1.0), (10, 2.0)):
        pts = sample_sphere(400_000, 4, dim, sphere_radius=m, generator=gen)
        x2 = ((a[:, None] * pts).sum(-2) ** 2).sum(-1)
        q, p = float((a**2).sum()), float((a**4).sum())
        assert math.isclose(float(x2.mean()), m**2 * q, rel_tol=0.01)
        assert math.isclose(float((x2**2).mean()), m**4 * (q * q + 2 * (q * q - p) / dim), rel_tol=0.02)



@pytest.mark.parametrize("heads", [1, 2, 3, 5])
def test_multihead_derivation(heads):
    der = TS.multihead(heads)
    assert der.equal_closes and der.concave
    values = {r: sp.Rational(k + 1, 7) for k, r in enumerate(der.rates)}
    direct = 1 - math.prod(1 - float(v) for v in values.values())
    assert math.isclose(float(der.coverage.subs(values)), direct)
    assert der.paper_coverage == sp.Rational(124, 125) and der.paper_heads == 3
    a, b = sp.symbols("a b", nonnegative=True)
    assert float(der.two_point_gap.subs({a: sp.Rational(1, 5), b: sp.Rational(9, 10)})) > 0


def test_multihead_derivation_inputs():
    with pytest.raises(ValueError, match="heads"):
        TS.multihead(0)
    assert TS.multihead(3, p_paper=sp.Rational(1, 2), target=sp.Rational(9, 10)).paper_heads == 4


def test_theory_holds_sympy_only():
    """theory/ is sympy only: the module imports neither torch nor numpy."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TS))
    names = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    modules = {node.module.split(".")[0] for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module}
    assert not ({"torch", "numpy", "scipy"} & (names | modules))
