"""Serve a built site under a sub-path, as GitHub Pages serves a project site
(``https://<user>.github.io/<repository>/``), and record every request.

    httpd = serve(root, "tostnp")            # http://127.0.0.1:PORT/tostnp/... -> root/...
    url = httpd.base                         # "http://127.0.0.1:PORT/tostnp/"
    ...                                      # load pages in a browser
    for line in httpd.failures(): ...        # every request that did not load, or left the sub-path

A request outside ``/<prefix>/`` is answered 404 and recorded as leaving the sub-path (an
absolute link "/x.png" works when the site is served at the root and breaks on GitHub Pages);
a request inside it for a file that does not exist is answered 404 and recorded as missing.
``?tostnp-inject`` on an HTML page serves it with ``httpd.inject`` put before ``</body>`` (the
browser test's measuring script, without copying the page). Used by .ci/browser-test and
.ci/lite-browser-test; standard library only.
"""
from __future__ import annotations

import functools
import http.server
import os
import threading
import urllib.parse
from pathlib import Path

INJECT_QUERY = "tostnp-inject"


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_response(self, code, message=None):       # send_error comes here too
        self.server.requests.append((self.command, self.path, int(code)))
        super().send_response(code, message)

    def _inside(self, path) -> bool:
        p = urllib.parse.urlsplit(path).path
        return (p + "/").startswith(self.server.prefix)

    def translate_path(self, path):
        p = urllib.parse.urlsplit(path).path
        return super().translate_path("/" + p[len(self.server.prefix):]
                                      if p.startswith(self.server.prefix) else "/")

    def do_HEAD(self):
        if not self._inside(self.path):
            self.send_error(404, "outside the site's sub-path")
            return
        super().do_HEAD()

    def do_GET(self):
        if not self._inside(self.path):
            self.send_error(404, "outside the site's sub-path")
            return
        parts = urllib.parse.urlsplit(self.path)
        if INJECT_QUERY in parts.query and parts.path.endswith(".html") and self.server.inject:
            local = Path(self.translate_path(parts.path))
            if local.is_file():
                body = local.read_text(encoding="utf-8").replace(
                    "</body>", self.server.inject + "</body>", 1).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
        super().do_GET()


class SubPathServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root, prefix, inject=""):
        self.root = str(Path(root).resolve())
        self.prefix = "/" + prefix.strip("/") + "/"
        self.inject = inject
        self.requests: list = []             # (method, path, status)
        handler = functools.partial(_Handler, directory=self.root)
        super().__init__(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.server_address[1]}{self.prefix}"

    def failures(self) -> list[str]:
        """One line per request that left the sub-path or did not load (status >= 400)."""
        out = []
        for method, path, status in self.requests:
            p = urllib.parse.urlsplit(path).path
            if p == "/favicon.ico":
                continue                     # the browser's own guess where a page names none
            if not (p + "/").startswith(self.prefix):
                out.append(f"{path} is outside {self.prefix} (an absolute path: breaks when the "
                           "site is served from a sub-path)")
            elif status >= 400:
                out.append(f"{path} did not load ({status})")
        return list(dict.fromkeys(out))


def serve(root, prefix: str = "tostnp", inject: str = "") -> SubPathServer:
    """Serve ``root`` at ``http://127.0.0.1:PORT/<prefix>/`` in a background thread."""
    httpd = SubPathServer(root, prefix, inject)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd
