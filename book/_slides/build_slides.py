"""Lecture slides for every chapter, cut from the BUILT book (run after the book build).

    python book/_slides/build_slides.py _build/html        -> _build/html/slides/<chapter>.html

Why from the built book: a slide shows the book's own equations (same numbers, same TeX), its
own figures (the images the executed pages produced from the committed results) and its own
prose with every reference, citation and glued number already resolved. A deck cannot drift
from its chapter: it is rebuilt from it on every CI run.

How a deck is cut, for each numbered chapter:
  1. title slide: the chapter's title and its "In this chapter" box;
  2. every `##` section except Summary and Exercises becomes one or more slides, holding in order
     its short paragraphs (<= MAX_PROSE characters of text; longer ones are left to the book),
     its display equations (with their numbers), lists, tables and figures; a slide is closed
     after MAX_EQS equations or one figure;
  3. the Summary; 4. the exercises' statements (no solutions); 5. a closing slide with links.
Code cells are left out: slides carry the mathematics and the measurements, the book the code.

Engine: a few lines of our own JavaScript (keys, swipe, #slide-n addresses, print one slide per
page) and the book's offline MathJax (`_static/mathjax`, shipped by sphinx-mathjax-offline):
nothing is fetched from a network, no new dependency (BeautifulSoup comes with the book's theme).
"""
from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag

MAX_PROSE = 700      # characters of text in one paragraph for it to go on a slide
MAX_EQS = 2          # display equations per slide
MAX_ITEMS = 4        # blocks per slide

CSS = """
:root { --fg:#1b1b1b; --accent:#1f4e8c; --muted:#666; }
* { box-sizing: border-box; }
html, body { margin:0; height:100%; background:#f4f4f4; font-family: system-ui, -apple-system,
  "Segoe UI", Roboto, sans-serif; color:var(--fg); }
.slide { display:none; position:absolute; inset:0; margin:auto; width:min(100vw, 177.7vh);
  height:min(100vh, 56.25vw); background:white; padding:3.2% 4.5% 5% 4.5%; overflow:auto;
  font-size:clamp(14px, 2.1vmin + 0.6vw, 30px); line-height:1.35; }
.slide.current { display:block; }
.slide h1 { color:var(--accent); font-size:1.9em; margin:0.2em 0 0.5em; }
.slide h2 { color:var(--accent); font-size:1.35em; margin:0 0 0.45em;
  border-bottom:2px solid #dde4ef; padding-bottom:0.15em; }
.slide h2 .part { color:var(--muted); font-size:0.6em; font-weight:normal; }
.slide p, .slide li { margin:0.35em 0; }
.slide div.math { overflow-x:auto; overflow-y:hidden; max-width:100%; display:flex;
  align-items:center; gap:0.6em; }
.slide div.math > mjx-container { flex:1 1 auto; min-width:0; overflow-x:auto; overflow-y:hidden; }
.slide .eqno { order:2; color:var(--muted); font-size:0.8em; white-space:nowrap; }
.slide .eqno a { display:none; }
.slide figure { margin:0.4em auto; text-align:center; }
.slide figure img { max-width:100%; max-height:58vh; }
.slide figcaption { font-size:0.6em; color:var(--muted); text-align:left; }
.slide table { border-collapse:collapse; font-size:0.62em; display:block; overflow-x:auto; }
.slide th, .slide td { border:1px solid #ccc; padding:0.2em 0.4em; }
.slide .box { background:#eef6ee; border-left:5px solid #2ca02c; padding:0.4em 0.8em; }
.slide .exercise { border-left:5px solid #ff7f0e; padding:0.1em 0.8em; margin:0.5em 0; }
.slide a { color:var(--accent); }
.slide .headerlink { display:none; }
.slide pre { font-size:0.55em; overflow-x:auto; }
.footer { position:fixed; bottom:0; right:0; padding:0.2em 0.9em; font-size:13px; color:var(--muted);
  background:rgba(255,255,255,0.92); z-index:5; }
.footer a { color:var(--muted); margin-left:0.8em; }
.footer button { font-size:13px; margin-left:0.4em; }
@media print {
  body { background:white; } .footer { display:none; }
  .slide { display:block; position:relative; width:100%; height:auto; min-height:100vh;
    page-break-after:always; overflow:visible; }
}
"""

JS = """
(function () {
  const slides = Array.from(document.querySelectorAll('.slide'));
  const counter = document.getElementById('counter');
  let i = 0;
  function show(n) {
    i = Math.max(0, Math.min(slides.length - 1, n));
    slides.forEach((s, k) => s.classList.toggle('current', k === i));
    counter.textContent = (i + 1) + ' / ' + slides.length;
    history.replaceState(null, '', '#slide-' + (i + 1));
  }
  const m = location.hash.match(/^#slide-(\\d+)$/);
  show(m ? parseInt(m[1], 10) - 1 : 0);
  document.addEventListener('keydown', (e) => {
    if (['ArrowRight', 'PageDown', ' ', 'n'].includes(e.key)) { show(i + 1); e.preventDefault(); }
    else if (['ArrowLeft', 'PageUp', 'p'].includes(e.key)) { show(i - 1); e.preventDefault(); }
    else if (e.key === 'Home') show(0);
    else if (e.key === 'End') show(slides.length - 1);
  });
  let x0 = null;
  document.addEventListener('touchstart', (e) => { x0 = e.touches[0].clientX; }, {passive: true});
  document.addEventListener('touchend', (e) => {
    if (x0 === null) return;
    const dx = e.changedTouches[0].clientX - x0;
    if (Math.abs(dx) > 50) show(dx < 0 ? i + 1 : i - 1);
    x0 = null;
  }, {passive: true});
  document.getElementById('prev').onclick = () => show(i - 1);
  document.getElementById('next').onclick = () => show(i + 1);
})();
"""

MATHJAX = """<script>window.MathJax = { tex: { inlineMath: [['\\\\(', '\\\\)']],
  displayMath: [['\\\\[', '\\\\]']] }, options: { processHtmlClass: 'math|slide' },
  chtml: { displayOverflow: 'scroll' } };</script>
<script defer src="../_static/mathjax/tex-chtml.js"></script>"""


def text_len(tag: Tag) -> int:
    return len(" ".join(tag.get_text(" ").split()))


def fix_links(tag: Tag, page_dir: str) -> Tag:
    """Hrefs and srcs of the book page (relative to book/) made relative to slides/."""
    for a in tag.find_all(["a", "img"]):
        attr = "href" if a.name == "a" else "src"
        url = a.get(attr)
        if not url or re.match(r"^[a-z]+:|^#|^/", url):
            if url and url.startswith("#"):
                a[attr] = f"../{page_dir}/{CURRENT_PAGE}{url}"
            continue
        a[attr] = f"../{page_dir}/{url}"
    for t in tag.find_all(class_="headerlink"):
        t.decompose()
    return tag


CURRENT_PAGE = ""


def blocks_of(section: Tag):
    """The blocks of a section in document order: ('p'|'eq'|'fig'|'list'|'table'|'h3', tag)."""
    for child in section.children:
        if isinstance(child, NavigableString) or not isinstance(child, Tag):
            continue
        cls = child.get("class") or []
        if child.name == "section":
            h3 = child.find(["h3", "h4"])
            if h3 is not None:
                yield "h3", h3
            yield from blocks_of(child)
        elif child.name == "p":
            yield "p", child
        elif child.name == "div" and "math" in cls:
            yield "eq", child
        elif child.name == "figure" or (child.name == "div" and "figure" in cls):
            yield "fig", child
        elif child.name in ("ul", "ol"):
            yield "list", child
        elif child.name == "div" and "pst-scrollable-table-container" in cls:
            yield "table", child
        elif child.name == "table":
            yield "table", child
        elif child.name == "blockquote":
            yield "p", child


def section_slides(title: str, section: Tag):
    slides, cur, n_eq, pending_h3 = [], [], 0, None

    def close():
        nonlocal cur, n_eq
        if any(kind in ("eq", "fig", "list", "table") for kind, _ in cur) or \
                (cur and not slides and any(kind == "p" for kind, _ in cur)):
            slides.append(cur)
        cur, n_eq = [], 0

    for kind, tag in blocks_of(section):
        if kind == "h3":
            pending_h3 = tag
            continue
        if kind == "p" and text_len(tag) > MAX_PROSE:
            continue
        if kind == "list" and text_len(tag) > 3 * MAX_PROSE:
            continue
        if (kind == "eq" and n_eq >= MAX_EQS) or (kind == "fig" and any(k == "fig" for k, _ in cur)) \
                or len(cur) >= MAX_ITEMS:
            close()
        if pending_h3 is not None:
            cur.append(("h3", pending_h3)); pending_h3 = None
        cur.append((kind, tag))
        n_eq += kind == "eq"
        if kind == "fig":
            close()
    close()
    return [(title, s) for s in slides]


def render_block(kind: str, tag: Tag, page_dir: str) -> str:
    tag = fix_links(tag, page_dir)
    if kind == "h3":
        return f"<h3>{html.escape(tag.get_text(' ').strip())}</h3>"
    return str(tag)


def deck(page: Path, out_dir: Path, html_root: Path, nav: dict) -> int:
    global CURRENT_PAGE
    CURRENT_PAGE = page.name
    page_dir = page.parent.relative_to(html_root).as_posix()
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    article = soup.find("article") or soup.body
    top = article.find("section")
    h1 = top.find("h1")
    for t in h1.find_all(class_="headerlink"):
        t.decompose()
    chap_title = " ".join(h1.get_text(" ").split()).replace("#", "").strip()
    slides = []
    # 1. title
    box = top.find("div", class_="admonition")
    learn = ""
    if box is not None:
        paras = [fix_links(p, page_dir) for p in box.find_all("p") if "admonition-title" not in (p.get("class") or [])]
        learn = f'<div class="box">{"".join(str(p) for p in paras)}</div>'
    slides.append(f"<h1>{html.escape(chap_title)}</h1>{learn}"
                  f'<p><a href="../{page_dir}/{page.name}">the chapter in the book</a></p>')
    summary, exercises = None, None
    for sec in top.find_all("section", recursive=False):
        h2 = sec.find("h2")
        if h2 is None:
            continue
        for t in h2.find_all(class_="headerlink"):
            t.decompose()
        name = " ".join(h2.get_text(" ").split())
        plain = re.sub(r"^[\d.]+\s*", "", name)
        if plain.startswith("Summary"):
            summary = sec; continue
        if plain.startswith("Exercises"):
            exercises = sec; continue
        parts = section_slides(name, sec)
        if not parts:                     # only long prose: its first paragraph, so no section is lost
            first = sec.find("p")
            parts = [(name, [("p", first)])] if first is not None else []
        for k, (title, blocks) in enumerate(parts):
            tail = f' <span class="part">({k + 1}/{len(parts)})</span>' if len(parts) > 1 else ""
            body = "".join(render_block(kind, tag, page_dir) for kind, tag in blocks)
            slides.append(f"<h2>{html.escape(title)}{tail}</h2>{body}")
    if summary is not None:
        ul = summary.find(["ul", "ol"])
        if ul is not None:
            slides.append(f"<h2>Summary</h2>{fix_links(ul, page_dir)}")
    if exercises is not None:
        items = []
        for ex in exercises.find_all("div", class_="exercise"):
            title = ex.find(class_="admonition-title")
            content = ex.find("section", id=re.compile("exercise-content")) or ex
            ps = [fix_links(p, page_dir) for p in content.find_all("p", recursive=True)
                  if "admonition-title" not in (p.get("class") or [])]
            items.append(f'<div class="exercise"><b>{html.escape(title.get_text(" ").strip()) if title else "Exercise"}'
                         f'</b>{"".join(str(p) for p in ps[:2])}</div>')
        if items:
            for k in range(0, len(items), 2):
                slides.append("<h2>Exercises</h2>" + "".join(items[k:k + 2]))
    slides.append(f"<h1>End of: {html.escape(chap_title)}</h1>"
                  f'<p><a href="../{page_dir}/{page.name}">Read the chapter</a> (derivations, code and checks)</p>'
                  + "".join(f'<p><a href="{u}">{html.escape(t)}</a></p>' for t, u in nav["links"]))
    body = "\n".join(f'<section class="slide" id="s{k + 1}">{s}</section>' for k, s in enumerate(slides))
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(chap_title)} (slides)</title>
<style>{CSS}</style>
{MATHJAX}
</head><body>
{body}
<div class="footer"><span id="counter"></span><button id="prev" aria-label="previous slide">&larr;</button><button id="next" aria-label="next slide">&rarr;</button>
<a href="index.html">all decks</a><a href="../{page_dir}/{page.name}">book</a></div>
<script>{JS}</script>
</body></html>
"""
    (out_dir / f"{page.stem}.html").write_text(doc, encoding="utf-8")
    return len(slides)


def chapters(root: Path) -> list[str]:
    """The numbered chapters of _toc.yml, in order (book/01_... to book/12_...)."""
    toc = (root / "_toc.yml").read_text(encoding="utf-8")
    return re.findall(r"file:\s*(book/\d\d_[a-z_]+)", toc)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_slides.py <built book html dir>", file=sys.stderr)
        return 2
    html_root = Path(argv[0])
    repo = Path(__file__).resolve().parents[2]
    if not (html_root / "_static" / "mathjax" / "tex-chtml.js").is_file():
        print(f"build_slides: {html_root} has no _static/mathjax (build the book first)", file=sys.stderr)
        return 2
    out_dir = html_root / "slides"
    out_dir.mkdir(exist_ok=True)
    counts = {}
    for name in chapters(repo):
        page = html_root / f"{name}.html"
        if not page.is_file():
            print(f"build_slides: {page} missing (build the book first)", file=sys.stderr)
            return 2
        nav = {"links": [("All decks", "index.html")]}
        counts[Path(name).stem] = deck(page, out_dir, html_root, nav)
    rows = "".join(f'<li><a href="{s}.html">{html.escape(s)}</a> ({n} slides)</li>' for s, n in counts.items())
    (out_dir / "index.html").write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
        f'content="width=device-width, initial-scale=1"><title>Slides</title></head><body>'
        f'<h1>Slides, one deck per chapter</h1><p>Keys: &rarr; / &larr;, space, Home, End; swipe on a '
        f'phone; print for one slide per page. Cut from the built book (book/_slides/build_slides.py).</p>'
        f'<ol>{rows}</ol><p><a href="../index.html">the book</a></p></body></html>', encoding="utf-8")
    (out_dir / "counts.json").write_text(json.dumps(counts, indent=1), encoding="utf-8")
    print("build_slides: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f" -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
