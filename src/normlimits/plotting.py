"""The book's figure style (seaborn) and small plotting helpers shared by chapters."""

from __future__ import annotations


def use_book_style() -> None:
    """Apply the book's seaborn theme: white grid, colour-blind palette, readable sizes."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "figure.figsize": (7.5, 4.2),
                         "axes.titlesize": "medium", "legend.fontsize": "small"})
