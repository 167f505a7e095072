"""The slide builder (book/_slides/build_slides.py) on a small built page written here: the deck
carries the page's numbered equations verbatim, its figures, its summary and its exercises'
statements (never their solutions), links back into the book, and every slide is reachable."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("bs4")

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_slides", ROOT / "book" / "_slides" / "build_slides.py")
build_slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_slides)

PAGE = """<!DOCTYPE html><html><body><article><section id="the-chapter">
<h1>4. The variational form<a class="headerlink" href="#the-chapter">#</a></h1>
<div class="admonition tip"><p class="admonition-title">In this chapter</p>
<p><strong>You will learn to</strong> state the bound.</p></div>
<p>Some introduction that stays in the book.</p>
<section id="a-bound"><h2>4.1. A bound<a class="headerlink" href="#a-bound">#</a></h2>
<p>For a matrix <span class="math notranslate nohighlight">\\(M\\)</span>, write</p>
<div class="math notranslate nohighlight" id="equation-eq-f"><span class="eqno">(4.1)</span>\\[F(M) = \\sum_i f(\\lambda_i)\\]</div>
<p>Then <a class="reference internal" href="#equation-eq-f">(4.1)</a> is bounded:</p>
<div class="math notranslate nohighlight" id="equation-eq-b"><span class="eqno">(4.2)</span>\\[F(M) \\le \\sum_i f(M_{ii})\\]</div>
<div class="math notranslate nohighlight" id="equation-eq-c"><span class="eqno">(4.3)</span>\\[x = y\\]</div>
<figure class="align-default" id="fig-gap"><img alt="" src="../_images/gap.png" />
<figcaption><p><span class="caption-number">Fig. 4.1 </span>The gap.</p></figcaption></figure>
</section>
<section id="summary"><h2>4.2. Summary<a class="headerlink" href="#summary">#</a></h2>
<ul><li><p>The bound holds (4.2).</p></li></ul></section>
<section id="exercises"><h2>4.3. Exercises</h2>
<div class="exercise admonition" id="ex-a"><p class="admonition-title"><span class="caption-number">Exercise 4.1 </span></p>
<section id="exercise-content"><p>Show the bound for f(x) = x.</p></section></div>
<div class="solution dropdown admonition" id="sol-a"><p class="admonition-title">Solution</p>
<section id="solution-content"><p>THE SOLUTION TEXT</p></section></div>
</section></section></article></body></html>"""


def test_a_deck_is_cut_from_the_built_page(tmp_path):
    html_root = tmp_path / "html"
    (html_root / "book").mkdir(parents=True)
    page = html_root / "book" / "04_variational.html"
    page.write_text(PAGE, encoding="utf-8")
    out = html_root / "slides"
    out.mkdir()
    n = build_slides.deck(page, out, html_root, {"links": [("All decks", "index.html")]})
    deck = (out / "04_variational.html").read_text(encoding="utf-8")
    slides = re.findall(r'<section class="slide" id="s(\d+)">', deck)
    assert n == len(slides) >= 5 and slides == [str(i) for i in range(1, n + 1)]
    # the equations verbatim, with the book's numbers, at most MAX_EQS per slide
    for number, tex in (("(4.1)", "F(M) = \\sum_i f(\\lambda_i)"), ("(4.2)", "F(M) \\le"), ("(4.3)", "x = y")):
        assert number in deck and tex in deck
    for body in re.split(r'<section class="slide"', deck)[1:]:
        assert body.count('<div class="math notranslate nohighlight"') <= build_slides.MAX_EQS
    # the figure, its image resolved from slides/, and its numbered caption
    assert 'src="../book/../_images/gap.png"' in deck and "Fig. 4.1" in deck
    # links into the book resolve from slides/: the page itself and its anchors
    assert 'href="../book/04_variational.html"' in deck
    assert 'href="../book/04_variational.html#equation-eq-f"' in deck
    # summary and exercise statements, no solutions, no header-link pilcrows
    assert "The bound holds" in deck and "Show the bound" in deck
    assert "THE SOLUTION TEXT" not in deck and ">#<" not in deck
    # offline maths: the book's own MathJax, nothing from a network
    assert '../_static/mathjax/tex-chtml.js' in deck and "http" not in deck.replace("http-equiv", "")


def test_the_builder_refuses_a_tree_without_the_book(tmp_path):
    assert build_slides.main([str(tmp_path)]) == 2
