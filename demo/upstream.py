#!/usr/bin/env python3
"""A tiny forum-like API for the sluice demo: the upstream behind Envoy.

Routes (JSON): GET /posts, POST /posts, POST /posts/{id}/replies, POST /posts/{id}/like,
POST /login, GET /healthz. State is in memory; it exists only so that metered requests have
something real to reach. Standard library only, so the demo needs nothing installed.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
_posts = []  # each: {"id", "author", "text", "likes", "replies": [...]}


def _user(handler):
    return handler.headers.get("x-user-id") or "anonymous"


class ForumHandler(BaseHTTPRequestHandler):
    server_version = "sluice-demo-forum/1"

    def log_message(self, fmt, *args):  # quiet: the demo prints its own summary
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("content-length") or 0)
        if length <= 0 or length > 64 * 1024:
            return {}
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return {}

    def _post_id(self, parts):
        try:
            return int(parts[1])
        except (IndexError, ValueError):
            return None

    def do_GET(self):
        if self.path == "/healthz":
            return self._send(200, {"ok": True})
        if self.path.startswith("/posts"):
            with _lock:
                return self._send(200, {"posts": _posts[-20:]})
        return self._send(404, {"error": "not found"})

    def do_POST(self):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        body = self._body()
        with _lock:
            if parts == ["login"]:
                return self._send(200, {"user": _user(self), "session": "demo"})
            if parts == ["posts"]:
                post = {"id": len(_posts) + 1, "author": _user(self),
                        "text": str(body.get("text", ""))[:280], "likes": 0, "replies": []}
                _posts.append(post)
                del _posts[:-1000]
                return self._send(201, post)
            if len(parts) == 3 and parts[0] == "posts" and parts[2] in ("replies", "like"):
                pid = self._post_id(parts)
                post = next((p for p in _posts if p["id"] == pid), None)
                if post is None:
                    return self._send(404, {"error": "no such post"})
                if parts[2] == "like":
                    post["likes"] += 1
                    return self._send(200, {"id": pid, "likes": post["likes"]})
                reply = {"author": _user(self), "text": str(body.get("text", ""))[:280]}
                post["replies"] = (post["replies"] + [reply])[-50:]
                return self._send(201, reply)
        return self._send(404, {"error": "not found"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8090", help="host:port (default %(default)s)")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), ForumHandler)
    server.daemon_threads = True
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
