"""A real gRPC client (grpcio, HTTP/2, content-type application/grpc) through a real Envoy running
the sluice filter (envoy/e2e_grpc_client.yaml), to a real gRPC upstream (grpcio): a call under its
limit is the upstream's OK; a call over it is a trailers-only gRPC error, RESOURCE_EXHAUSTED by
default or the configured `grpc_denied_status`, with the denial's detail in grpc-message and its
retry (retry-after, grpc-retry-pushback-ms, the rate-limit headers) as metadata; a call the
limiter cannot decide under `failure_mode: deny` is UNAVAILABLE. Runs on both filter builds
(docs/filter.md, "gRPC clients")."""

import socket
import struct
import uuid
from concurrent import futures

import grpc  # scripts/install/30-python.sh installs grpcio: a missing module fails, never skips
import pytest

import stack

ACTION = "e2e_grpc_calls"
CAPACITY = 2
METHOD = "/e2e.Echo/Call"
# A timeout the filter's default callout would meet on a loaded machine: decisions under test
# here, not latency.
TIMEOUT_MS = 1000


def start_grpc_upstream():
    """A gRPC server on 127.0.0.1 answering e2e.Echo/Call (raw bytes, no protobuf) with
    b"pong:" + the request. Returns (server, port); stop with server.stop(0)."""
    def call(request, context):
        return b"pong:" + request

    handler = grpc.method_handlers_generic_handler(
        "e2e.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    assert port, "the gRPC upstream could not bind"
    server.start()
    return server, port


@pytest.fixture(scope="module")
def grpc_upstream():
    server, port = start_grpc_upstream()
    yield port
    server.stop(0)


@pytest.fixture(scope="module")
def grpc_envoy(tmp, backend, grpc_upstream):
    backend.put_rule({"action": ACTION, "algorithm": "gcra", "capacity": CAPACITY,
                      "rate": {"count": CAPACITY, "period": "1h"}})
    envoy = stack.Envoy(tmp, "e2e_grpc_client.yaml",
                        {"RLS_PORT": backend.grpc_port, "UPSTREAM_PORT": grpc_upstream, "TIMEOUT_MS": TIMEOUT_MS},
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]).start()
    yield envoy
    envoy.stop()


def fresh_user():
    return f"grpc-{uuid.uuid4().hex[:12]}"


def call(envoy, listener, user):
    """One unary call as `user`; returns ("ok", reply) or ("error", grpc.RpcError)."""
    with grpc.insecure_channel(f"127.0.0.1:{envoy.ports[listener]}") as channel:
        stub = channel.unary_unary(METHOD)
        try:
            return "ok", stub(b"ping", metadata=[("x-user", user)], timeout=10)
        except grpc.RpcError as e:
            return "error", e


def metadata(md):
    return {k: v for k, v in (md or ())}


def proto_fields(data):
    """A protobuf message's fields as {number: [values]}: varints as ints, length-delimited as
    bytes (all that google.rpc.Status, Any, RetryInfo and Duration use). Written here, not
    generated, so that the filter's encoder is checked by a decoder that is not prost."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            length = varint()
            value, i = data[i:i + length], i + length
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def retry_info_ms(details, code, message):
    """The retry delay in ms from grpc-status-details-bin (google.rpc.Status with one
    google.rpc.RetryInfo), checking its code and message match the answer's."""
    status = proto_fields(details)
    assert status[1] == [code] and status[2] == [message.encode()], status
    [detail] = status[3]
    any_ = proto_fields(detail)
    assert any_[1] == [b"type.googleapis.com/google.rpc.RetryInfo"], any_
    [delay] = proto_fields(any_[2][0])[1]
    duration = proto_fields(delay)
    return duration.get(1, [0])[0] * 1000 + duration.get(2, [0])[0] // 1_000_000


def spend(envoy, listener, user):
    for _ in range(CAPACITY):
        kind, reply = call(envoy, listener, user)
        assert (kind, reply) == ("ok", b"pong:ping"), reply


def h2_frames_of_one_call(port, user):
    """The frames Envoy sends on stream 1 for one gRPC call made by hand over h2c (prior
    knowledge): [(type, flags)]. HPACK literals without indexing, no Huffman; the answer's
    header blocks are not decoded (grpcio reads their content above): only their framing."""
    def literal(name, value):
        name, value = name.encode(), value.encode()
        assert len(name) < 127 and len(value) < 127
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    def frame(kind, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    block = b"".join(literal(n, v) for n, v in [
        (":method", "POST"), (":scheme", "http"), (":path", METHOD), (":authority", "e2e"),
        ("content-type", "application/grpc"), ("te", "trailers"), ("x-user", user)])
    message = b"\x00" + struct.pack(">I", 4) + b"ping"
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
                  + frame(1, 0x4, 1, block) + frame(0, 0x1, 1, message))
        data = b""
        while True:
            while len(data) < 9 or len(data) < 9 + int.from_bytes(data[:3], "big"):
                chunk = s.recv(65536)
                assert chunk, f"connection closed before stream 1 ended: {out}"
                data += chunk
            length = int.from_bytes(data[:3], "big")
            kind, flags = data[3], data[4]
            stream = struct.unpack(">I", data[5:9])[0] & 0x7FFFFFFF
            data = data[9 + length:]
            if kind == 4 and not flags & 0x1:
                s.sendall(frame(4, 0x1, 0, b""))  # ack the server's SETTINGS
            if stream != 1:
                continue
            out.append((kind, flags))
            if kind == 3 or flags & 0x1:  # RST_STREAM, or END_STREAM
                return out


def test_a_call_under_the_limit_is_the_upstreams_ok(grpc_envoy):
    kind, reply = call(grpc_envoy, "LISTEN_OPEN_PORT", fresh_user())
    assert (kind, reply) == ("ok", b"pong:ping")


def test_a_call_over_the_limit_is_resource_exhausted_with_its_retry_as_metadata(grpc_envoy):
    user = fresh_user()
    spend(grpc_envoy, "LISTEN_OPEN_PORT", user)
    kind, e = call(grpc_envoy, "LISTEN_OPEN_PORT", user)
    assert kind == "error"
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.code(), e.details())
    # Trailers-only: nothing in the initial metadata, everything in the trailers.
    assert not metadata(e.initial_metadata()), e.initial_metadata()
    md = metadata(e.trailing_metadata())
    retry_s = int(md["retry-after"])
    assert 0 < retry_s <= 3600, md
    assert e.details() == f'rate limit of action "{ACTION}" exceeded; retry after {retry_s} s'
    pushback = int(md["grpc-retry-pushback-ms"])
    assert (retry_s - 1) * 1000 < pushback <= retry_s * 1000, md
    # The same retry as a typed google.rpc.RetryInfo (what rich-error clients read).
    assert retry_info_ms(md["grpc-status-details-bin"], 8, e.details()) == pushback
    assert md["x-ratelimit-limit"].startswith(f"{CAPACITY},") and md["x-ratelimit-remaining"] == "0", md
    assert "ratelimit" in md and "ratelimit-policy" in md, md
    # The next call is answered from the denial cache: the same gRPC error, marked.
    kind, again = call(grpc_envoy, "LISTEN_OPEN_PORT", user)
    assert kind == "error" and again.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert metadata(again.trailing_metadata()).get("x-sluice-cache") == "hit"
    # The frames themselves: one HEADERS frame ending the stream (END_STREAM | END_HEADERS), no DATA.
    assert h2_frames_of_one_call(grpc_envoy.ports["LISTEN_OPEN_PORT"], user) == [(1, 0x5)]


def test_the_configured_grpc_denied_status_applies(grpc_envoy):
    user = fresh_user()
    spend(grpc_envoy, "LISTEN_CLOSED_PORT", user)
    kind, e = call(grpc_envoy, "LISTEN_CLOSED_PORT", user)
    assert kind == "error"
    assert e.code() == grpc.StatusCode.ABORTED, (e.code(), e.details())  # grpc_denied_status: 10
    assert "exceeded" in e.details()
    assert "grpc-retry-pushback-ms" in metadata(e.trailing_metadata())


def test_a_call_the_limiter_cannot_decide_under_deny_is_unavailable(tmp, grpc_upstream):
    """RLS_PORT is a port nothing listens on: the exchange stream cannot open, and both listeners
    (failure_mode deny) refuse. The filter's own answer, not grpcio's: its detail and
    x-sluice-failure are there."""
    closed = stack.free_port()
    envoy = stack.Envoy(tmp, "e2e_grpc_client.yaml",
                        {"RLS_PORT": closed, "UPSTREAM_PORT": grpc_upstream, "TIMEOUT_MS": 100},
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
    try:
        envoy.start()
        for listener in ("LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"):
            kind, e = call(envoy, listener, fresh_user())
            assert kind == "error"
            assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
            assert "could not decide" in e.details(), e.details()
            md = metadata(e.trailing_metadata())
            assert md.get("x-sluice-failure"), md
            assert "grpc-retry-pushback-ms" not in md and "grpc-status-details-bin" not in md, md
        assert envoy.stats().get("wasmcustom.sluice.failures_deny", 0) >= 2
    finally:
        envoy.stop()
