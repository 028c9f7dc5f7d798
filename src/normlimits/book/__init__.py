"""The book's machinery: the chapter helpers, plotting style, pages, timings, the execution cache, the
Sphinx extensions, Colab, JupyterLab, the PDF and the stand-in replicas. The top layer: may import
every other one (not ``dev``).
"""
