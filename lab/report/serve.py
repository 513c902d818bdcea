"""`lab.report --serve PORT`: the report directory over http on localhost only, while --watch re-renders it; the
page asks VERSION_PATH for the report's version (its report.html's modification time) and reloads itself when it
changed."""
from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lab.errors import LabError

HOST = "127.0.0.1"  # never another interface: the runs' configs and paths are not for the network
VERSION_PATH = ".lab_report_version"


class _Handler(SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.lstrip("/").split("?")[0] != VERSION_PATH:
            return super().do_GET()
        page = Path(self.directory) / "report.html"
        body = str(page.stat().st_mtime_ns if page.is_file() else 0).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # a request per poll: the terminal stays for lab.report's own lines
        pass


def bind(directory: Path, port: int) -> ThreadingHTTPServer:
    """The server for `directory` on HOST:port (0: any free port), bound before anything is written: a port in
    use is one error line."""
    try:
        return ThreadingHTTPServer((HOST, port), functools.partial(_Handler, directory=str(directory)))
    except OSError as e:
        raise LabError(f"--serve {port}: cannot listen on {HOST}:{port} ({e.strerror}); pass another port, or 0 "
                       "for any free one") from None


def start(server: ThreadingHTTPServer) -> str:
    """Serve in a background thread; -> the report's address."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{HOST}:{server.server_address[1]}/report.html"
