"""Sphinx extension: every figure's image says what it shows (its alt text), from its caption, and
opens full size when clicked.

A figure drawn by a code cell (``mystnb: figure:``) or pasted by ``glue:figure`` reaches the page
with no alt text of its own, or with its file's path. Before each page is written, every image
inside a captioned figure whose alt text is missing or a path gets the caption's first sentence
in plain text (math turned into Unicode by :func:`normlimits.claims.plain_text`), e.g. "True and
expected distance against L at N = 5 on this book's model (the paper's Fig. 2a)." An alt text set
on purpose (``:alt:``) is kept.

Click to enlarge: on an HTML page, every image not already inside a link is wrapped in a link to
its own file in ``_images/`` (:func:`link_images`), so a reader can open a figure shown at the
column's width at its full resolution. An image that already links somewhere keeps its link.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable

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


#: the class of the links :func:`link_images` adds (besides Sphinx's own ``image-reference``)
ENLARGE_CLASS = "image-enlarge"


def link_images(doctree, href: Callable[[nodes.image], str | None]) -> int:
    """Wrap every image of ``doctree`` that is not already inside a reference in a reference to
    ``href(image)`` (its full-size file; None: left alone), class :data:`ENLARGE_CLASS`; returns
    how many images were wrapped."""
    count = 0
    for image in list(doctree.findall(nodes.image)):
        if isinstance(image.parent, nodes.reference):
            continue
        target = href(image)
        if not target:
            continue
        link = nodes.reference("", "", refuri=target, internal=True, classes=[ENLARGE_CLASS])
        image.replace_self(link)
        link.append(image)
        count += 1
    return count


def image_file_href(images: dict, imgpath: str) -> Callable[[nodes.image], str | None]:
    """``href`` for :func:`link_images` on a page whose images folder is ``imgpath`` (relative to
    the page): the file Sphinx copies the image to, ``imgpath/<name>``, where ``images`` (the
    environment's ``{source path: (documents, file name)}``) knows the image's ``uri`` or one of
    its ``candidates``; a remote image links to its URL; an image Sphinx does not copy, None."""
    def href(image: nodes.image) -> str | None:
        uri = image.get("uri", "")
        if "://" in uri:
            return uri
        for path in (uri, *image.get("candidates", {}).values()):
            if path in images:
                return posixpath.join(imgpath, images[path][1])
        return None

    return href


def link_images_to_their_files(app, doctree, docname) -> int:
    """``doctree-resolved`` handler: :func:`link_images` with the page's own ``_images`` path
    (HTML builders only); returns how many images were wrapped."""
    from sphinx.util.osutil import relative_uri

    if getattr(app.builder, "format", None) != "html":
        return 0
    imgpath = relative_uri(app.builder.get_target_uri(docname), app.builder.imagedir)
    return link_images(doctree, image_file_href(app.env.images, imgpath))


def setup(app):
    app.connect("doctree-resolved", describe_figures)
    app.connect("doctree-resolved", link_images_to_their_files)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
