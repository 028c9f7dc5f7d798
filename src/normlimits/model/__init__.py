"""Models and their attention: resolving the model setting and loading it (pretrained folders and hub
ids, GGUF files, the stand-ins and their training diary), the corpus and its windows, the attention
tap, capture and the capture cache, held-out bits per byte. Imports ``core`` and ``metrics``.
"""
