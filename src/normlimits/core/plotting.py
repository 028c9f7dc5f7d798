"""The book's figure style (seaborn) and the rule that keeps figures readable where they are shown.

A figure is shown at the width of the site's content column, about 7.2 inches (690 CSS px) at
1280 px. So every figure is at most :data:`MAX_FIGURE_WIDTH` inches wide and all its text at least
:data:`MIN_FONT_PT` points: shown at the column's width, its text is then at least 9 pt. Figures
are PNG at :data:`DPI` dots per inch, so one shown at the column's width has a natural width of at
most 1.6 times the displayed one (sharp on a high-density screen, not wastefully large).

:func:`use_book_style` applies the style and, in a Jupyter kernel, installs the check: a figure
that breaks the rule (:func:`figure_problems`) is not drawn but shown as an error naming the
problem, which fails the site's tests.
"""

from __future__ import annotations

#: the widest figure, in inches (the content column at 1280 px, 690 CSS px at 96 px per inch)
MAX_FIGURE_WIDTH = 7.2
#: the smallest text, in points, at that width
MIN_FONT_PT = 9.0
#: resolution of the figures' PNG files
DPI = 150


def use_book_style() -> None:
    """Apply the book's seaborn theme (white grid, colour-blind palette) with text of at least
    :data:`MIN_FONT_PT` points and figures :data:`DPI` dots per inch; in a Jupyter kernel, check
    every figure before it is drawn (:func:`install_figure_check`)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    plt.rcParams.update({
        "figure.dpi": DPI, "savefig.dpi": DPI, "figure.figsize": (MAX_FIGURE_WIDTH, 4.0),
        "font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "xtick.labelsize": 9,
        "ytick.labelsize": 9, "legend.fontsize": 9, "legend.title_fontsize": 9.5,
        "figure.titlesize": 11, "figure.constrained_layout.use": False,
    })
    install_figure_check()


def figure_problems(fig) -> list[str]:
    """What makes ``fig`` unreadable at the content column's width: wider than
    :data:`MAX_FIGURE_WIDTH` inches, or visible text smaller than :data:`MIN_FONT_PT` points."""
    from matplotlib.text import Text

    problems = []
    width, _ = fig.get_size_inches()
    if width > MAX_FIGURE_WIDTH + 1e-6:
        problems.append(f"the figure is {width:.2f} in wide (at most {MAX_FIGURE_WIDTH} in: wider, it is "
                        "shrunk to the column and its text with it); stack its panels or narrow it")
    small = sorted({round(t.get_fontsize(), 1) for t in fig.findobj(Text)
                    if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_FONT_PT - 1e-6})
    if small:
        problems.append(f"text of {', '.join(f'{s:g}' for s in small)} pt (at least {MIN_FONT_PT:g} pt)")
    return problems


def checked_png(fig) -> bytes:
    """The figure as PNG (tight bounding box, :data:`DPI`), or ValueError naming what makes it
    unreadable (:func:`figure_problems`)."""
    import io

    problems = figure_problems(fig)
    if problems:
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
        raise ValueError(f"figure {title!r} is not readable in the book: " + "; ".join(problems))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def install_figure_check() -> bool:
    """In an IPython kernel, draw figures (shown or glued) through :func:`checked_png`; returns
    whether a kernel was found."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(Figure, checked_png)
    return True


def median_band(ax, x, values, *, label: str | None = None, band_label: str | None = None,
                color=None, marker: str = "o", ls: str = "-", ms: float = 4, alpha: float = 0.15):
    """The book's summary of many curves on one axis: their median (a line) and their 10th to
    90th percentile (a band of the line's colour).

    ``values``: [..., len(x)], every leading index one curve (heads, or windows and heads, are
    pooled). ``label`` names the line in the legend, ``band_label`` the band (None: unlabelled).
    Returns the median's ``Line2D``.
    """
    import numpy as np

    curves = np.asarray(values, dtype=float).reshape(-1, len(x))
    (line,) = ax.plot(x, np.median(curves, 0), color=color, marker=marker, ls=ls, ms=ms, label=label)
    ax.fill_between(x, np.percentile(curves, 10, 0), np.percentile(curves, 90, 0),
                    color=line.get_color(), alpha=alpha, lw=0, label=band_label)
    return line


#: how the paper's reported values are drawn on a reproduction: grey, dashed, labelled "paper: ..."
PAPER_STYLE = dict(color="0.35", ls="--", lw=1.2)


def paper_mark(ax, *, label: str, x: float | None = None, y: float | None = None):
    """The paper's reported value on ``ax``: a vertical line at ``x`` or a horizontal one at ``y``
    (exactly one), in :data:`PAPER_STYLE`, labelled ``"paper: " + label`` for the legend. Take the
    value from :mod:`normlimits.core.protocol`, never a number typed at the call. Returns the line."""
    if (x is None) == (y is None):
        raise ValueError("paper_mark draws one line: give x (vertical) or y (horizontal), not both")
    line = ax.axvline(x, **PAPER_STYLE) if x is not None else ax.axhline(y, **PAPER_STYLE)
    line.set_label(f"paper: {label}")
    return line
