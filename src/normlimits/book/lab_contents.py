"""JupyterLab's view of a chapter: the book's glue roles shown as expressions the kernel evaluates.

``make lab`` runs JupyterLab with :class:`BookContentsManager`, jupytext's contents manager plus
one translation of Markdown cells, both ways:

* opening a notebook, every same-page ``{glue:text}`KEY:FMT``` becomes the inline expression
  ``{eval}`__import__("normlimits.core.glued").core.glued.paste("KEY:FMT")```, which jupyterlab-myst
  evaluates in the kernel when the cell is run and which shows the value formatted as the book
  does (:func:`normlimits.core.glued.paste`);
* saving, each such expression becomes the glue role again, and the results jupyterlab-myst stores
  in the cell's metadata (``user_expressions``) are dropped, so the ``.md`` file on disk is the
  book's source, unchanged by a round trip through the lab.

Glue roles that paste from another page (``path::key``) and glue directives are left as they are,
roles inside a glue directive's body (a ``{glue:figure}`` caption) included: jupyterlab-myst does not
parse the body of a directive it does not know, so an expression there would never be evaluated.
"""

from __future__ import annotations

import re

#: jupyterlab-myst's cell metadata for evaluated inline expressions
EXPRESSIONS_METADATA = "user_expressions"
_SAFE = r"[^`\"\\:\n][^`\"\\\n]*"
GLUE_ROLE = re.compile(r"\{glue:text\}`(" + _SAFE + r")`")
EVAL_ROLE = re.compile(r"\{eval\}`__import__\(\"normlimits\.core\.glued\"\)\.core\.glued\.paste\(\"(" + _SAFE + r")\"\)`")


#: a fenced glue directive, from its opening fence to the closing fence of the same length
GLUE_DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{glue:[a-z]+\}.*?^(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)


def glue_to_eval(markdown: str) -> str:
    """Same-page ``{glue:text}`` roles as inline expressions that paste the glued value.

    Roles inside a fenced glue directive (a figure's caption) stay roles: see the module's note.
    """
    def replace(match):
        content = match.group(1)
        if "::" in content:
            return match.group(0)
        return f'{{eval}}`__import__("normlimits.core.glued").core.glued.paste("{content}")`'

    pieces, start = [], 0
    for directive in GLUE_DIRECTIVE.finditer(markdown):
        pieces.append(GLUE_ROLE.sub(replace, markdown[start:directive.start()]))
        pieces.append(directive.group(0))
        start = directive.end()
    pieces.append(GLUE_ROLE.sub(replace, markdown[start:]))
    return "".join(pieces)


def eval_to_glue(markdown: str) -> str:
    """The inverse of :func:`glue_to_eval`."""
    return EVAL_ROLE.sub(lambda match: f"{{glue:text}}`{match.group(1)}`", markdown)


def _markdown_cells(notebook):
    for cell in notebook.get("cells", ()):
        if cell.get("cell_type") == "markdown":
            yield cell


def for_lab(notebook) -> None:
    """Rewrite a notebook's Markdown cells for JupyterLab, in place."""
    for cell in _markdown_cells(notebook):
        cell["source"] = glue_to_eval(_text(cell["source"]))


def for_disk(notebook) -> None:
    """Rewrite a notebook's Markdown cells back to the book's source, in place."""
    for cell in _markdown_cells(notebook):
        cell["source"] = eval_to_glue(_text(cell["source"]))
        cell.get("metadata", {}).pop(EXPRESSIONS_METADATA, None)


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _manager_class():
    from jupytext import AsyncTextFileContentsManager

    class BookContentsManager(AsyncTextFileContentsManager):
        """jupytext's contents manager; chapters' glue roles shown as kernel expressions."""

        async def get(self, path, content=True, type=None, format=None, **kwargs):
            model = await super().get(path, content=content, type=type, format=format, **kwargs)
            if content and model.get("type") == "notebook" and model.get("content"):
                for_lab(model["content"])
            return model

        async def save(self, model, path=""):
            if model.get("type") == "notebook" and model.get("content"):
                for_disk(model["content"])
            result = await super().save(model, path)
            if result.get("type") == "notebook" and result.get("content"):
                for_lab(result["content"])
            return result

    return BookContentsManager


def __getattr__(name):
    # built on first use, so importing this module does not import jupyter_server
    if name == "BookContentsManager":
        cls = _manager_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
