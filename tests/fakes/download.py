"""A local HTTP server on 127.0.0.1 serving a random payload, for the download tests."""

import hashlib
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAYLOAD = os.urandom(200_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


class Server:
    """Serves PAYLOAD; can cut the first response short, ignore Range, or trickle.

    ``trickle``: seconds between pieces of ``piece`` bytes (a slow server whose every read
    comes within any per-read timeout); it stops by itself after ``trickle_for`` seconds.
    """

    def __init__(self, cut_first=False, honour_range=True, trickle=0.0, piece=100, trickle_for=30):
        self.requests = []
        self.cut_first, self.honour_range = cut_first, honour_range
        self.trickle, self.piece, self.trickle_for = trickle, piece, trickle_for
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                outer.requests.append(rng)
                start = 0
                if rng and outer.honour_range:
                    start = int(rng.split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header(
                        "Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}"
                    )
                else:
                    self.send_response(200)
                body = PAYLOAD[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if outer.cut_first and len(outer.requests) == 1:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                if outer.trickle:
                    stop = time.monotonic() + outer.trickle_for
                    for at in range(0, len(body), outer.piece):
                        if time.monotonic() > stop:
                            return
                        try:
                            self.wfile.write(body[at : at + outer.piece])
                            self.wfile.flush()
                        except OSError:  # the client gave up
                            return
                        time.sleep(outer.trickle)
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data.bin"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
