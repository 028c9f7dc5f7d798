"""The chapters' glued values, kept in the kernel, so JupyterLab can show them in the prose.

In the book, ``{glue:text}`key:fmt``` pastes a value that a code cell glued with
``myst_nb.glue``. JupyterLab's MyST renderer (jupyterlab-myst) does not know the glue roles, but it
evaluates inline expressions (``{eval}`...```) in the kernel when a Markdown cell is run. Under
``make lab`` the chapters' glue roles are shown to JupyterLab as such expressions, calling
:func:`paste` (see :mod:`normlimits.book.lab_contents`); this module remembers every value glued in the
kernel so that :func:`paste` can show it, formatted exactly as myst-nb formats it in the book.

:func:`install` hooks the kernel's display publisher (``start_chapter`` calls it; outside an
IPython kernel it does nothing). Glued data is recorded as it is published, whatever the value.

:func:`glue` is the package's one call into ``myst_nb.glue`` (the chapters' numbers through
:func:`normlimits.book.chapter.glue_all`, the verdicts through :func:`normlimits.claims.record`).
"""

from __future__ import annotations

#: glue key -> the glued value's MIME bundle (without myst-nb's hidden-output prefix)
VALUES: dict[str, dict] = {}
PENDING = "(computed further down: run this cell again after the chapter has run)"


def glue(name: str, value) -> None:
    """Glue ``value`` under ``name`` for the prose without displaying it (myst-nb imported on
    first use: the package works without it outside a notebook)."""
    from myst_nb import glue as myst_glue

    myst_glue(name, value, display=False)


class Pasted(str):
    """A pasted value: shows as its text (no quotes) in Jupyter's text/plain output."""

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def record(message: dict) -> dict:
    """Display-publisher hook: remember glued data (``scrapbook`` metadata); pass the message on."""
    content = message.get("content") or {}
    scrapbook = (content.get("metadata") or {}).get("scrapbook")
    if scrapbook and scrapbook.get("name"):
        prefix = scrapbook.get("mime_prefix") or ""
        VALUES[scrapbook["name"]] = {key[len(prefix):]: value for key, value in (content.get("data") or {}).items()
                                     if key.startswith(prefix)}
    return message


def install() -> bool:
    """Record glued values in the running IPython kernel; returns whether a kernel was found."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    register = getattr(publisher, "register_hook", None)
    if register is None:
        return False
    hooks = getattr(publisher, "_hooks", [])
    if record not in hooks:
        register(record)
    return True


def paste(content: str) -> Pasted:
    """What ``{glue:text}`content``` shows in the book; ``content`` is ``key`` or ``key:format_spec``.

    Parsed and formatted as myst-nb does. A key not glued yet (the prose refers to a value
    computed further down the chapter) gives :data:`PENDING`.
    """
    from myst_nb.core.variables import format_plain_text

    key, _, fmt_spec = content.rpartition(":") if ":" in content else (content, "", "s")
    data = VALUES.get(key)
    if data is None:
        return Pasted(PENDING)
    if "text/plain" not in data:
        raise KeyError(f"glued value {key!r} has no text/plain representation ({sorted(data)})")
    return Pasted(format_plain_text(data["text/plain"], fmt_spec))
