"""The filter module Envoy loads exports only the proxy-wasm callbacks the filter implements
(scripts/build-filter.sh trims the rest, wasm/src/exports.rs): Envoy calls a callback only if it
is exported, so each unused one would cost every request a call into the VM."""

import stack

UNUSED = {"proxy_on_request_body", "proxy_on_request_trailers", "proxy_on_response_body",
          "proxy_on_log", "proxy_on_done"}
USED = {"proxy_on_vm_start", "proxy_on_configure", "proxy_on_context_create", "proxy_on_request_headers",
        "proxy_on_response_headers", "proxy_on_response_trailers", "proxy_on_delete", "proxy_on_tick", "proxy_on_http_call_response",
        "proxy_on_grpc_receive", "proxy_on_grpc_close", "proxy_on_memory_allocate", "memory"}


def leb(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def exports(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\0asm\x01\0\0\0"
    at, names = 8, []
    while at < len(data):
        section = data[at]
        size, at = leb(data, at + 1)
        if section == 7:
            p = at
            count, p = leb(data, p)
            for _ in range(count):
                length, p = leb(data, p)
                names.append(data[p:p + length].decode())
                _, p = leb(data, p + length + 1)
        at += size
    return set(names)


def test_the_built_filter_exports_only_the_callbacks_it_implements():
    names = exports(stack.WASM)
    assert USED <= names, USED - names
    assert not UNUSED & names, UNUSED & names
