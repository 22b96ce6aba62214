"""Writes one gRPC-framed ShouldRateLimit request for h2load, which sends a
fixed body: python3 h2load_body.py OUT [DOMAIN] [KEY] [VALUE] (default
domain bench, one descriptor key=h2load)."""
import sys


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def field(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


out = sys.argv[1]
domain, key, value = (sys.argv[2:5] + ["bench", "key", "h2load"][len(sys.argv[2:5]):])[:3]
req = field(1, domain.encode()) + field(2, field(1, field(1, key.encode()) + field(2, value.encode())))
with open(out, "wb") as f:
    f.write(b"\0" + len(req).to_bytes(4, "big") + req)
