#!/usr/bin/env python3
"""Serves the attnscope app on http://127.0.0.1:$PORT/ (default 8080): index.html, attn-scope.js,
web/, the model files under assets/models/ and the committed models/ (dates → ISO), with the page's Content Security Policy as an HTTP
header and the rest of scripts/headers.txt's headers for every file (cross-origin isolation
included, so the engine runs on threads; ATTNSCOPE_ISOLATION=0 leaves COOP and COEP out, as a plain
static host would, and the engine runs on one thread). Static files only; nothing else in the
repository is served."""
import http.server
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def every_file_headers():
    """The `Name: value` lines under `/*` in scripts/headers.txt (dist/_headers)."""
    headers, block = [], None
    for line in open(os.path.join(ROOT, "scripts", "headers.txt"), encoding="utf-8"):
        if line.startswith("#") or not line.strip():
            continue
        if not line[0].isspace():
            block = line.strip()
        elif block == "/*":
            name, value = line.strip().split(":", 1)
            headers.append((name.strip(), value.strip()))
    return headers


HEADERS = every_file_headers()
if os.environ.get("ATTNSCOPE_ISOLATION") == "0":
    HEADERS = [(n, v) for n, v in HEADERS if n not in ("Cross-Origin-Opener-Policy", "Cross-Origin-Embedder-Policy")]
ALLOWED = ("/index.html", "/attn-scope.js", "/web/", "/assets/models/", "/models/")


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".safetensors": "application/octet-stream",
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=ROOT, **kwargs)

    def do_GET(self):
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if path == "/":
            self.path = "/index.html"
        elif not path.startswith(ALLOWED) or ".." in path:
            self.send_error(404, "not part of the app")
            return
        super().do_GET()

    def end_headers(self):
        self.send_header("Cache-Control", "no-cache")
        # the page's Content Security Policy as an HTTP header too, and cross-origin isolation
        # (dist/_headers says the same)
        for name, value in HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, fmt, *args):
        if os.environ.get("ATTNSCOPE_QUIET") != "1":
            super().log_message(fmt, *args)


def main():
    port = int(os.environ.get("PORT", "8080"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"attnscope: serving http://127.0.0.1:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
