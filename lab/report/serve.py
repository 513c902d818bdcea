"""`lab.report --serve PORT`: the report directory over http on localhost only, while --watch re-renders it.
The open page learns of a new render by server-sent events: it keeps EVENTS_PATH open and the server writes the
report's version (report.html's modification time) to it as soon as a render is done (`changed`), so the page
reloads without asking again and again. Where the event stream fails (a proxy that buffers, a browser without
EventSource) the page falls back to asking VERSION_PATH every few seconds."""
from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lab.errors import LabError

HOST = "127.0.0.1"  # never another interface: the runs' configs and paths are not for the network
VERSION_PATH = ".lab_report_version"
EVENTS_PATH = ".lab_report_events"
# An open event stream hears from the server at least this often: a comment line when nothing changed, which is
# how a closed page's connection is noticed (the write fails) and a render by another process is still seen.
KEEPALIVE_S = 10.0


def version(directory: Path) -> str:
    page = directory / "report.html"
    return str(page.stat().st_mtime_ns if page.is_file() else 0)


class Server(ThreadingHTTPServer):
    """The http server, and a condition the render loop signals (`changed`) that the event streams wait on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.renders = threading.Condition()
        self.stopping = False

    def shutdown(self) -> None:
        self.stopping = True
        changed(self)  # open event streams end
        super().shutdown()


class _Handler(SimpleHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # browsers revalidate by ETag only on HTTP/1.1 answers (HTTP/1.0: Last-Modified)
    etag: str | None = None  # of the file this request answers with (a connection serves several requests)

    def send_head(self):
        """A file's ETag is its modification time in ns and size, and decides a conditional request (the standard
        handler ignores If-Modified-Since beside an If-None-Match): Last-Modified's whole seconds would answer 304
        for a render made within the second of the copy held."""
        self.etag = None
        path = Path(self.translate_path(self.path))
        if path.is_file():
            st = path.stat()
            self.etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
            if self.headers.get("If-None-Match") == self.etag:
                self.send_response(304)
                self.end_headers()
                return None
        return super().send_head()

    def end_headers(self) -> None:
        # every load asks again (a 304 when the file is unchanged): a browser's heuristic cache would otherwise
        # show an earlier render when the address is opened again
        self.send_header("Cache-Control", "no-cache")
        if self.etag:
            self.send_header("ETag", self.etag)
        super().end_headers()

    def do_GET(self):
        self.etag = None
        path = self.path.lstrip("/").split("?")[0]
        if path == EVENTS_PATH:
            return self._events()
        if path != VERSION_PATH:
            return super().do_GET()
        body = version(Path(self.directory)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _events(self) -> None:
        """text/event-stream: `data: <version>` now and after every render that changed it, a comment otherwise."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")  # the stream has no length: it ends when the connection does
        self.close_connection = True
        self.end_headers()
        sent = None
        try:
            while not self.server.stopping:
                now = version(Path(self.directory))
                self.wfile.write(f"data: {now}\n\n".encode() if now != sent else b": still\n\n")
                self.wfile.flush()
                sent = now
                with self.server.renders:
                    self.server.renders.wait(KEEPALIVE_S)
        except OSError:  # the page was closed or reloaded
            pass

    def log_message(self, *args) -> None:  # the terminal stays for lab.report's own lines
        pass


def bind(directory: Path, port: int) -> Server:
    """The server for `directory` on HOST:port (0: any free port), bound before anything is written: a port in
    use is one error line."""
    try:
        return Server((HOST, port), functools.partial(_Handler, directory=str(directory)))
    except OSError as e:
        raise LabError(f"--serve {port}: cannot listen on {HOST}:{port} ({e.strerror}); pass another port, or 0 "
                       "for any free one") from None


def start(server: Server) -> str:
    """Serve in a background thread; -> the report's address."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{HOST}:{server.server_address[1]}/report.html"


def changed(server: Server) -> None:
    """A render is done: every open event stream sends the new version."""
    with server.renders:
        server.renders.notify_all()
