"""Sphinx extension: every figure's image says what it shows (its alt text), from its caption.

A figure drawn by a code cell (``mystnb: figure:``) or pasted by ``glue:figure`` reaches the page
with no alt text of its own, or with its file's path. Before each page is written, every image
inside a captioned figure whose alt text is missing or a path gets the caption's first sentence
in plain text (math turned into Unicode by :func:`normlimits.claims.plain_text`), e.g. "True and
expected distance against L at N = 5 on this book's model (the paper's Fig. 2a)." An alt text set
on purpose (``:alt:``) is kept.
"""

from __future__ import annotations

import re

from docutils import nodes

from normlimits.claims import plain_text

#: an alt text that is a file's name or path, not a description
_PATHLIKE = re.compile(r"\.(png|jpe?g|svg|gif|webp)$|^[0-9a-f]{16,}$|^\S*/\S*$", re.I)
#: where a caption's first sentence ends: a full stop, not one of an abbreviation
_SENTENCE_END = re.compile(r"(?<!\bFig)(?<!\bEq)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)\.(\s|$)")


def is_pathlike(alt: str | None) -> bool:
    """Whether ``alt`` is missing or names a file rather than saying what the image shows."""
    return not alt or not alt.strip() or bool(_PATHLIKE.search(alt.strip()))


def caption_text(caption: nodes.Node) -> str:
    """A caption in plain text: its words, its math as Unicode (``$\\tilde d$`` -> ``d̃``)."""
    parts: list[str] = []

    def walk(node):
        if isinstance(node, nodes.math):
            parts.append(plain_text(f"${node.astext()}$"))
            return
        if isinstance(node, nodes.Text):
            parts.append(node.astext())
            return
        for child in node.children:
            walk(child)

    walk(caption)
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def first_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of ``text`` (abbreviations such as "Fig." do not end it), at most
    ``limit`` characters (cut at a word, with an ellipsis)."""
    match = _SENTENCE_END.search(text)
    sentence = text[:match.start() + 1] if match else text
    if len(sentence) > limit:
        sentence = sentence[:limit].rsplit(" ", 1)[0] + "…"
    return sentence.strip()


def describe_figures(app, doctree, docname) -> int:
    """Give every captioned figure's image without a real alt text its caption's first
    sentence; returns how many images were described."""
    count = 0
    for figure in doctree.findall(nodes.figure):
        captions = [c for c in figure.children if isinstance(c, nodes.caption)]
        if not captions:
            continue
        text = first_sentence(caption_text(captions[0]))
        if not text:
            continue
        for image in figure.findall(nodes.image):
            if is_pathlike(image.get("alt")):
                image["alt"] = text
                count += 1
    return count


def setup(app):
    app.connect("doctree-resolved", describe_figures)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
