"""Symbolic derivations (sympy), one module per chapter, shared by the chapters and the tests."""
