"""normlimits: the shared, tested package behind the book.

Modules: ``settings`` (environment settings), ``models`` (resolve and load a model), ``corpus``
(text and windows), ``capture`` (queries, keys, values, logits, weights per layer and head),
``standin`` (the offline model), ``normalizers`` (softmax and its alternatives), the metric
modules of the chapters, ``theory`` (sympy derivations), ``ledger`` (the claims ledger), ``book``
(chapter set-up and assertion helpers), ``plotting`` (figure style).
"""

__version__ = "0.1.0"
