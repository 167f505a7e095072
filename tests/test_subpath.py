"""The browser tests serve the site under a sub-path, as GitHub Pages does (.ci/subpath.py):
the server on a tiny site, then .ci/browser-test on one that passes and on one whose script asks
for a site-absolute path (which works at the root and breaks on GitHub Pages)."""
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".ci"))
import subpath  # noqa: E402

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def _site(d: Path, script: str = "") -> Path:
    (d / "sub").mkdir(parents=True)
    (d / "img.png").write_bytes(PNG)
    (d / "index.html").write_text('<html><head><title>t</title></head><body>'
                                  '<a href="sub/page.html">page</a></body></html>')
    (d / "sub" / "page.html").write_text(
        '<html><head><title>p</title></head><body><p id="top">text</p>'
        '<img src="../img.png" alt="x"><a href="../index.html#">home</a>'
        f'<a href="#top">top</a><script>{script}</script></body></html>')
    return d


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_the_server_keeps_the_site_under_its_sub_path(tmp_path):
    httpd = subpath.serve(_site(tmp_path / "site"), "tostnp", inject="<i id='injected'></i>")
    try:
        assert httpd.base.endswith("/tostnp/")
        assert _get(httpd.base + "sub/page.html")[0] == 200
        status, body = _get(httpd.base[:-1])                   # /tostnp -> /tostnp/ (redirect)
        assert status == 200 and 'href="sub/page.html"' in body
        assert _get(httpd.base.replace("/tostnp/", "/img.png"))[0] == 404   # at the root: no
        assert _get(httpd.base + "missing.png")[0] == 404
        status, body = _get(httpd.base + "sub/page.html?" + subpath.INJECT_QUERY)
        assert body.index("<i id='injected'></i>") < body.index("</body>")
        assert "injected" not in _get(httpd.base + "sub/page.html")[1]
    finally:
        httpd.shutdown()
    bad = httpd.failures()
    assert len(bad) == 2
    assert bad[0].startswith("/img.png is outside /tostnp/")
    assert bad[1] == "/tostnp/missing.png did not load (404)"


@pytest.mark.slow
def test_browser_test_fails_on_a_site_absolute_request(tmp_path):
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    if browser is None:
        pytest.skip("no chromium (CI installs it before the browser tests)")

    def run(site):
        return subprocess.run([sys.executable, str(ROOT / ".ci" / "browser-test"), str(site)],
                              capture_output=True, text=True, timeout=600)
    good = run(_site(tmp_path / "good" / "html"))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "served under /tostnp/" in good.stdout
    # a script that fetches from the site's root (as a notebook or a search index is fetched):
    # neither the built files nor the DOM show it; it loads at the root, not on GitHub Pages
    bad = run(_site(tmp_path / "bad" / "html", "fetch('/img.png');"))
    assert bad.returncode == 1
    assert "/img.png is outside /tostnp/" in bad.stdout
