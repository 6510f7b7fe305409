"""`./dtl slides` renders every lab deck to a PDF and an offline HTML deck, and the
pages are right: one page per slide of the Markdown, each page with content below
its title (looked at as a picture: `pdftoppm`), every figure on the page of the
slide that shows it (`pdfimages`), no character LaTeX could not set, and no line
running far past the frame. The HTML deck has one <section> per slide and carries
its images inside (it opens without a network).

Needs pandoc, pdflatex (TeX Live) and poppler-utils, which `./dtl setup` installs.
Without them the tests skip, saying so, except in CI (CI=true), where they fail.
About 15 s on the 2-core machine for all seven decks.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

TOOLS = ("pandoc", "pdflatex", "pdftoppm", "pdfinfo", "pdfimages")
MISSING = [t for t in TOOLS if shutil.which(t) is None]

# A page is empty below its title when fewer pixels than this are not background
# there. At RESOLUTION two words make about 15 and "One short line." 26, a frame
# with a title only none; the decks' sparsest page makes about 240.
MIN_INK_PIXELS = 10
INK_LEVEL = 230           # gray level (0 black, 255 white) darker than which is not background
RESOLUTION = 20           # dpi for the look at the pages: 126 x 71 pixels for 16:9
MAX_OVERFULL_PT = 15.0    # a line past the frame by more than this is an error


def decks() -> list[Path]:
    return sorted(p for p in (helpers.ROOT / "slides").glob("[0-9][0-9]_*") if (p / "slides.md").is_file())


def slides_of(markdown: str) -> list[str]:
    """The deck's slides: the text between lines that hold only `---`, outside
    fenced code (a `---` inside ``` is part of a code block, not a separator)."""
    slides, current, fenced = [], [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if line.strip() == "---" and not fenced:
            slides.append("\n".join(current))
            current = []
        else:
            current.append(line)
    slides.append("\n".join(current))
    return slides


def read_pgm(path: Path) -> tuple[int, int, bytes]:
    """Width, height and 8-bit pixels of a binary PGM (P5), as pdftoppm -gray writes it."""
    data = path.read_bytes()
    fields, pos = [], 0
    while len(fields) < 4:  # magic, width, height, maxval, separated by whitespace and comments
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P5" or int(fields[3]) != 255:
        raise ValueError(f"{path}: not an 8-bit binary PGM")
    width, height = int(fields[1]), int(fields[2])
    pixels = data[pos + 1:pos + 1 + width * height]
    if len(pixels) != width * height:
        raise ValueError(f"{path}: truncated")
    return width, height, pixels


def ink_below_title(path: Path) -> int:
    """Pixels that are not background below the frame title and above Beamer's
    navigation symbols (the bottom 8%). The title is the first band of rows with
    ink, ended by a blank row."""
    width, height, pixels = read_pgm(path)
    rows = [pixels[r * width:(r + 1) * width] for r in range(height)]
    inked = [sum(1 for p in row if p < INK_LEVEL) for row in rows]
    r = 0
    while r < height and not inked[r]:
        r += 1
    while r < height and inked[r]:
        r += 1
    return sum(inked[r:int(height * 0.92)])


@unittest.skipIf(MISSING and not os.environ.get("CI"),
                 f"missing {', '.join(MISSING)} (./dtl setup installs them)")
class TestSlides(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = helpers.temp_folder(cls)
        cls.out = cls.tmp / "slides"
        from dtlgrade.turns import work_turn  # helpers put grader/ on sys.path
        with work_turn():  # 30 s of CPU: not beside another class's speed item (run_suite.py)
            run = subprocess.run([str(helpers.ROOT / "dtl"), "slides", "--out", str(cls.out)],
                                 capture_output=True, text=True, timeout=300)
        cls.run_output = run.stdout + run.stderr
        cls.returncode = run.returncode
        cls.decks = decks()

    def setUp(self):
        self.assertEqual(self.returncode, 0, self.run_output[-3000:])

    def pdf(self, deck: Path) -> Path:
        return self.out / f"{deck.name}.pdf"

    def test_every_deck_rendered(self):
        self.assertGreaterEqual(len(self.decks), 7)
        for deck in self.decks:
            self.assertTrue(self.pdf(deck).is_file(), deck.name)
            self.assertTrue((self.out / f"{deck.name}.html").is_file(), deck.name)
            self.assertIn(f"{deck.name}.pdf", self.run_output)

    def test_one_page_per_slide(self):
        for deck in self.decks:
            slides = slides_of((deck / "slides.md").read_text())
            info = subprocess.run(["pdfinfo", str(self.pdf(deck))], capture_output=True,
                                  text=True, check=True).stdout
            pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
            self.assertEqual(pages, len(slides), f"{deck.name}: pages vs slides in slides.md")

    def test_pages_have_content_below_the_title(self):
        pictures = self.tmp / "pages"
        pictures.mkdir(exist_ok=True)
        for deck in self.decks:
            prefix = pictures / deck.name[:2]
            subprocess.run(["pdftoppm", "-gray", "-r", str(RESOLUTION), str(self.pdf(deck)),
                            str(prefix)], check=True)
            pages = sorted(pictures.glob(f"{deck.name[:2]}-*.pgm"))
            self.assertEqual(len(pages), len(slides_of((deck / "slides.md").read_text())), deck.name)
            for page in pages:
                self.assertGreaterEqual(ink_below_title(page), MIN_INK_PIXELS,
                                        f"{deck.name} page {page.stem}: empty below the title")

    def test_figures_are_on_their_slides(self):
        for deck in self.decks:
            slides = slides_of((deck / "slides.md").read_text())
            expected = {n + 1 for n, s in enumerate(slides) if re.search(r"!\[[^\]]*\]\(", s)}
            listing = subprocess.run(["pdfimages", "-list", str(self.pdf(deck))],
                                     capture_output=True, text=True, check=True).stdout
            got = {int(line.split()[0]) for line in listing.splitlines()[2:]
                   if line.split()[2] == "image"}
            self.assertTrue(expected, f"{deck.name} has no figure")
            self.assertEqual(got, expected, f"{deck.name}: pages with an image")

    def test_latex_set_every_character_and_kept_lines_on_the_frame(self):
        for deck in self.decks:
            log = (self.out / "tex" / f"{deck.name}.log").read_text(errors="replace")
            self.assertNotIn("Missing character", log, deck.name)
            too_wide = [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide", log)]
            self.assertFalse([x for x in too_wide if x > MAX_OVERFULL_PT],
                             f"{deck.name}: lines past the frame (pt): {too_wide}")

    def test_html_is_one_section_per_slide_with_its_images_inside(self):
        for deck in self.decks:
            html = (self.out / f"{deck.name}.html").read_text()
            slides = slides_of((deck / "slides.md").read_text())
            self.assertEqual(html.count("<section"), len(slides), deck.name)
            images = re.findall(r'<img src="([^"]{0,40})', html)
            figures = sum(len(re.findall(r"!\[[^\]]*\]\(", s)) for s in slides)
            self.assertEqual(len(images), figures, deck.name)
            for src in images:
                self.assertTrue(src.startswith("data:image/"), f"{deck.name}: {src} is not inside")
            self.assertNotRegex(html, r'<link[^>]+stylesheet|<script[^>]+src=', deck.name)


class TestSlideCounting(unittest.TestCase):
    """The slide count the tests above rely on, on a hand-made deck."""

    def test_separators_outside_code_only(self):
        deck = "# Title\n\ntext\n\n---\n\n## Two\n\n```text\n---\n```\n\n---\n\n## Three\n"
        slides = slides_of(deck)
        self.assertEqual(len(slides), 3)
        self.assertIn("```text\n---\n```", slides[1])


if __name__ == "__main__":
    unittest.main()
