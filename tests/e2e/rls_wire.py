"""Envoy's rate limit service (envoy.service.ratelimit.v3) on the wire, for tests that ask sluice's
RLS directly, as the peer's README writes its requests (domain, descriptors of (key, value)
entries, hits_addend). No protobuf package: the few fields used are encoded and decoded by hand
(proto3 wire format), and the call is grpcio's with raw bytes.

RateLimitRequest: domain = 1, descriptors = 2 (RateLimitDescriptor: entries = 1 (key = 1,
value = 2), hits_addend = 3 (UInt64Value: value = 1)), hits_addend = 3.
RateLimitResponse: overall_code = 1, statuses = 2 (DescriptorStatus: code = 1, current_limit = 2
(RateLimit: requests_per_unit = 1, unit = 2, name = 3), limit_remaining = 3,
duration_until_reset = 4 (Duration: seconds = 1))."""

from dataclasses import dataclass

import grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}
UNITS = {0: "UNKNOWN", 1: "SECOND", 2: "MINUTE", 3: "HOUR", 4: "DAY", 5: "MONTH", 6: "YEAR", 7: "WEEK"}


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, payload):
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _uint(number, n):
    return _varint(number << 3) + _varint(n)


def encode_request(domain, descriptors, hits_addend=0):
    """`descriptors`: lists of (key, value) pairs, or (pairs, descriptor hits_addend) tuples."""
    out = _field(1, domain.encode())
    for d in descriptors:
        pairs, addend = (d if isinstance(d, tuple) else (d, None))
        body = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in pairs)
        if addend is not None:
            body += _field(3, _uint(1, addend) if addend else b"")
        out += _field(2, body)
    if hits_addend:
        out += _uint(3, hits_addend)
    return out


def _read_varint(data, i):
    shift = n = 0
    while True:
        byte = data[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, i


def _fields(data):
    """(number, value) for each field: an int (varint) or bytes (length-delimited)."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _read_varint(data, i)
        elif kind == 2:
            length, i = _read_varint(data, i)
            value, i = data[i:i + length], i + length
        elif kind == 5:
            value, i = data[i:i + 4], i + 4
        elif kind == 1:
            value, i = data[i:i + 8], i + 8
        else:
            raise ValueError(f"wire type {kind}")
        yield number, value


@dataclass
class Status:
    code: str
    limit: tuple = None  # (requests_per_unit, unit, name), None without current_limit
    remaining: int = 0
    reset: int = None  # duration_until_reset's seconds, None without it


def _status(data):
    s = Status(code=CODES[0])
    for number, value in _fields(data):
        if number == 1:
            s.code = CODES[value]
        elif number == 2:
            rpu, unit, name = 0, 0, ""
            for n, v in _fields(value):
                if n == 1:
                    rpu = v
                elif n == 2:
                    unit = v
                elif n == 3:
                    name = v.decode()
            s.limit = (rpu, UNITS[unit], name)
        elif number == 3:
            s.remaining = value
        elif number == 4:
            s.reset = dict(_fields(value)).get(1, 0)
    return s


def decode_response(data):
    """(overall code, [Status])."""
    overall, statuses = CODES[0], []
    for number, value in _fields(data):
        if number == 1:
            overall = CODES[value]
        elif number == 2:
            statuses.append(_status(value))
    return overall, statuses


class Client:
    """ShouldRateLimit over an insecure channel to 127.0.0.1:`port`."""

    def __init__(self, port):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.call = self.channel.unary_unary(METHOD)

    def ask(self, domain, descriptors, hits_addend=0, timeout=5):
        return decode_response(self.call(encode_request(domain, descriptors, hits_addend), timeout=timeout))

    def close(self):
        self.channel.close()
