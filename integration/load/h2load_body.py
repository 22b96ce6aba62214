"""Writes one gRPC-framed ShouldRateLimit request for h2load, which sends a
fixed body: python3 h2load_body.py OUT [DOMAIN] [KEY] [VALUE] [N] (default
domain bench, one descriptor key=h2load; with N > 1, N descriptors whose
values are VALUE0 .. VALUE<N-1>)."""
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
n = int(sys.argv[5]) if len(sys.argv) > 5 else 1
values = [value] if n == 1 else [f"{value}{i}" for i in range(n)]
req = field(1, domain.encode()) + b"".join(
    field(2, field(1, field(1, key.encode()) + field(2, v.encode()))) for v in values
)
with open(out, "wb") as f:
    f.write(b"\0" + len(req).to_bytes(4, "big") + req)
