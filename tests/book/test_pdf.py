"""``make pdf``: the whole book as one PDF, checked with poppler's tools (Debian's poppler-utils).

The PDF is made as a reader makes it (``make pdf``, after the strict build of the session fixture,
so the chapters come from the execution cache). Then: the page count covers the book; pages
rendered to images (``pdftoppm``) are not blank, and are kept under ``_build/pdf/pages/``; the
text of every page (``pdftohtml -xml``, which names each run's font) shows no raw TeX outside code,
and the formulas are there as MathJax's glyphs (Type 3 fonts, which poppler reports as family
"Times"); every figure of the single page is embedded (``pdfimages``); theorems are numbered and
the bibliography is printed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.book, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\s][^$\n]{0,80}\$|\{glue")
MATH_FAMILY = "Times"  # poppler's name for the Type 3 fonts Chromium embeds MathJax's glyphs as
NUMBERED = re.compile(r"\b(Theorem|Lemma|Corollary|Proposition) \d+(\.\d+)*\b")


def poppler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: `make browser` installs Debian's poppler-utils with chromium.", pytrace=False)
    return path


@pytest.fixture(scope="module")
def pdf(built_book) -> dict:
    start = time.perf_counter()
    result = subprocess.run(["make", "--no-print-directory", "pdf"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        pytest.fail(f"make pdf failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-5000:]}",
                    pytrace=False)
    path = built_book / "pdf" / "book.pdf"
    assert path.is_file(), f"make pdf did not write {path}"
    info = subprocess.run([poppler("pdfinfo"), str(path)], capture_output=True, text=True, check=True).stdout
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
    xml = subprocess.run([poppler("pdftohtml"), "-xml", "-i", "-stdout", str(path)],
                         capture_output=True, text=True, check=True).stdout
    print(f"make pdf: {pages} pages, {path.stat().st_size / 1e6:.1f} MB, {seconds:.0f} s")
    return {"path": path, "pages": pages, "xml": ET.fromstring(xml), "seconds": seconds,
            "html": (built_book / "singlehtml" / "book.html").read_text()}


def page_runs(root: ET.Element):
    """(page number, font family, text) of every text run."""
    families = {f.get("id"): f.get("family") for f in root.iter("fontspec")}
    for page in root.iter("page"):
        for run in page.iter("text"):
            yield int(page.get("number")), families[run.get("font")], "".join(run.itertext())


def test_the_pdf_covers_the_book(pdf):
    from normlimits.book.pages import toc_files
    import yaml

    chapters = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    assert pdf["pages"] >= 2 * len(chapters), f"{pdf['pages']} pages for {len(chapters)} pages of the book"
    text = " ".join(t for _, _, t in page_runs(pdf["xml"]))
    for title in re.findall(r"^# (.+)$", (ROOT / "book" / "notation.md").read_text(), re.M)[:1]:
        assert title.strip() in text


def test_math_is_typeset_not_raw(pdf):
    raw = [(n, m) for n, family, t in page_runs(pdf["xml"]) if "Mono" not in family for m in RAW_TEX.findall(t)]
    assert not raw, f"raw TeX in the PDF's text (page, text): {raw[:10]}"
    formulas = len(re.findall(r'class="math[ "]', pdf["html"]))
    glyph_runs = sum(1 for _, family, _ in page_runs(pdf["xml"]) if family == MATH_FAMILY)
    assert formulas > 0, "the single page has no formula: the book has math"
    assert glyph_runs >= formulas, f"{formulas} formulas but only {glyph_runs} runs of MathJax glyphs"


def test_every_figure_is_embedded(pdf):
    """Each image of the single page is in the PDF at its own pixel size (Chromium embeds them
    unscaled; the other images it writes are rasterised shadows, grey JPEGs)."""
    from PIL import Image

    folder = pdf["path"].parent.parent / "singlehtml"
    figures = sorted(set(re.findall(r'<img[^>]+src="(_images/[^"]+)"', pdf["html"])))
    assert figures, "the single page shows no figure: the chapters have figures"
    listing = subprocess.run([poppler("pdfimages"), "-list", str(pdf["path"])],
                             capture_output=True, text=True, check=True).stdout.splitlines()[2:]
    embedded = {(int(row[3]), int(row[4])) for row in map(str.split, listing) if row[2] == "image"}
    missing = [src for src in figures if Image.open(folder / src).size not in embedded]
    assert not missing, f"{len(missing)} of {len(figures)} figures are not in the PDF: {missing[:5]}"


def test_theorems_are_numbered_and_the_bibliography_is_printed(pdf):
    from pybtex.database import parse_file

    text = " ".join(t for _, _, t in page_runs(pdf["xml"]))
    assert NUMBERED.search(text), "no numbered theorem, lemma or corollary in the PDF"
    entries = parse_file(str(ROOT / "book" / "references.bib")).entries
    surnames = {str(p.last_names[0]) for e in entries.values() for p in e.persons.get("author", [])[:1]}
    printed = {name for name in surnames if name in text}
    assert len(printed) == len(surnames) or len(printed) >= 3, f"bibliography: {sorted(surnames - printed)} missing"


def test_pages_render_to_images_that_are_not_blank(pdf):
    from PIL import Image, ImageStat

    out = pdf["path"].parent / "pages"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    figure_pages = sorted({int(line.split()[0]) for line in subprocess.run(
        [poppler("pdfimages"), "-list", str(pdf["path"])], capture_output=True, text=True, check=True
    ).stdout.splitlines()[2:] if line.split()[2] == "image"})
    math_pages = sorted({n for n, family, _ in page_runs(pdf["xml"]) if family == MATH_FAMILY})
    chosen = sorted({1, math_pages[len(math_pages) // 2], figure_pages[-1]})
    for number in chosen:
        subprocess.run([poppler("pdftoppm"), "-r", "60", "-png", "-f", str(number), "-l", str(number),
                        str(pdf["path"]), str(out / "page")], check=True)
    images = sorted(out.glob("page-*.png"))
    assert len(images) == len(chosen)
    for image in images:
        stat = ImageStat.Stat(Image.open(image).convert("L"))
        assert stat.stddev[0] > 10, f"{image.name} looks blank (grey-level spread {stat.stddev[0]:.1f})"


def test_no_code_cell_toggles_on_paper(pdf):
    """The toggles of hidden code cells ("Show code cell source") do nothing on paper: the print
    stylesheet (book/_static/layout.css) leaves them out of the PDF."""
    text = " ".join(t for _, _, t in page_runs(pdf["xml"]))
    assert "Show code cell" not in text and "Hide code cell" not in text
