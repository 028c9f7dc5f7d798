"""Pure functions of tensors: the normalisers and their Jacobians, vanishing attention, distances and
their readings, token means, critical N, separability with its bounds and Monte Carlo, multi-head
coverage. Import only ``core``; never the model layer.
"""
