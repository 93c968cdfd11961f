#!/usr/bin/env python3
"""Traffic generator for the sluice demo: several forum users through Envoy, one of them abusive.

Polite users post, reply and like at human speed; "mallory" hammers replies and logins. The load
is bounded: a fixed request rate (default 12/s in total) and a maximum duration (default 1 h), so
it never becomes a load test by accident. Prints a one-line summary every 10 s.
"""

import argparse
import http.client
import json
import random
import signal
import sys
import time

USERS = {
    # name: (requests per second, weights for post/reply/like/login)
    "alice": (0.5, (3, 4, 6, 1)),
    "bob": (0.7, (2, 5, 5, 1)),
    "carol": (0.4, (4, 3, 6, 1)),
    "mallory": (8.0, (1, 8, 2, 3)),
}
ACTIONS = ("post", "reply", "like", "login")


def request(conn, user, action, post_id):
    path = {"post": "/posts", "reply": f"/posts/{post_id}/replies",
            "like": f"/posts/{post_id}/like", "login": "/login"}[action]
    body = json.dumps({"text": f"{user} says hi"})
    conn.request("POST", path, body=body,
                 headers={"content-type": "application/json", "x-user-id": user})
    response = conn.getresponse()
    response.read()
    return response.status


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:10000", help="Envoy host:port")
    parser.add_argument("--duration", type=float, default=3600.0, help="stop after this many seconds")
    parser.add_argument("--rate-scale", type=float, default=1.0, help="multiply every user's rate")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.target.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    rng = random.Random(7)
    next_at = {u: time.monotonic() for u in USERS}
    counts = {}
    deadline = time.monotonic() + args.duration
    last_report = time.monotonic()
    while time.monotonic() < deadline:
        user = min(next_at, key=next_at.get)
        delay = next_at[user] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        rate, weights = USERS[user]
        next_at[user] += rng.expovariate(rate * args.rate_scale)
        action = rng.choices(ACTIONS, weights=weights)[0]
        try:
            status = request(conn, user, action, rng.randint(1, 5))
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            status = "error"
        key = (user, status)
        counts[key] = counts.get(key, 0) + 1
        if time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            summary = ", ".join(f"{u}:{s}={n}" for (u, s), n in sorted(counts.items(), key=str))
            print(f"traffic: {summary}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
