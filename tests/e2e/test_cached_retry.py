"""A 429 answered from the denial cache gives the same wait as the backend's own 429, for every
algorithm. The cache holds a denial at most max_ttl_ms (600 ms in e2e.yaml); before the fix, the
cached 429 counted down to the end of that hold and told a client denied for an hour to come back
within a second."""

import time
import uuid

import pytest

import stack

RULES = stack.HOURLY_LIMITS
CAPACITY = 2


def denied(envoy, user):
    """A 429 and the retry_after_ms of its body."""
    r = stack.raw_request(envoy.ports["LISTEN_OPEN_PORT"], "GET", b"/retry/x", [("x-user", user)])
    assert r.status == 429, (r.status, r.body)
    return r, r.json()["retry_after_ms"]


@pytest.mark.parametrize("algorithm", sorted(RULES))
def test_a_cached_429_gives_the_same_wait_as_the_backend(envoy, backend, algorithm):
    backend.put_rule(dict(action="e2e_retry", algorithm=algorithm, capacity=CAPACITY, **RULES[algorithm]))
    # fixed_window and sliding_window windows are aligned to the clock: stay clear of an hour's
    # last seconds, where the window could turn between filling it and the denial.
    if time.time() % 3600 > 3590:
        time.sleep(3600 - time.time() % 3600 + 0.1)
    # Near the edge a fixed window's wait is only what is left of the hour: expect at least a
    # minute, or (within a minute of the edge) all but 5 s of what is left.
    to_edge_ms = (3600 - time.time() % 3600) * 1000
    floor_ms = min(60_000, to_edge_ms - 5_000)
    user = f"u-{uuid.uuid4().hex[:12]}".encode()
    for _ in range(CAPACITY):
        r = stack.raw_request(envoy.ports["LISTEN_OPEN_PORT"], "GET", b"/retry/x", [("x-user", user)])
        assert r.status == 200, r.body
    start = time.monotonic()
    backend_429, backend_ms = denied(envoy, user)
    assert "x-sluice-cache" not in backend_429.headers, "the first denial comes from the backend"
    assert backend_ms > floor_ms, f"{algorithm}: an hour-scale rule denied for only {backend_ms} ms"
    cached_429, cached_ms = denied(envoy, user)
    elapsed_ms = (time.monotonic() - start) * 1000
    assert cached_429.headers.get("x-sluice-cache") == "hit", cached_429.headers

    # The same deadline: the cached wait is the backend's, less the time that passed between the
    # two answers (at most from the first send to the second reply), give or take 1 ms rounding.
    assert backend_ms - elapsed_ms - 1 <= cached_ms <= backend_ms + 1, (algorithm, backend_ms, cached_ms)
    assert abs(int(backend_429.headers["retry-after"]) - int(cached_429.headers["retry-after"])) <= 1
    # The rest of the headers agree too (reset counted down within a second, same policy).
    for name in ("ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining"):
        assert cached_429.headers[name] == backend_429.headers[name], name
    assert abs(int(backend_429.headers["x-ratelimit-reset"]) - int(cached_429.headers["x-ratelimit-reset"])) <= 1
