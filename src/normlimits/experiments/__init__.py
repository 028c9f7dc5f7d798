"""What a chapter computes from captures: Figure 2's and Figure 4's numbers, the reading table, the
separability sweep and curves, sharpness, training at temperature, the alternatives and the removal
experiment, variants on other models, the bench and the book's cost projection. Imports ``core``,
``metrics``, ``theory``, ``claims`` and ``model``.
"""
