"""normlimits: the shared, tested package behind the book.

Modules: ``settings`` (environment settings), ``devices`` (device and dtype settings),
``validation`` (shared checks of public inputs), ``models`` (resolve and load a model), ``corpus``
(text and windows), ``capture`` (queries, keys, values, logits, weights per layer and head, any
supported family; ``attention_tap`` records them through transformers' attention registry;
``capture_cache`` shares them between the chapters of one build),
``standin`` (the offline model), ``normalizers`` (softmax and its alternatives), the metric
modules of the chapters, ``theory`` (sympy derivations), ``ledger`` (the claims ledger), ``book``
(chapter set-up and assertion helpers), ``plotting`` (figure style).
"""

__version__ = "0.1.0"
