#!/usr/bin/env python3
"""Writes seed inputs for the Transfer fuzz harness (layout in scripts/fuzz/TransferFuzz.swift)."""
import hashlib, os, struct, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
SESSION = 0x5EED
MAGIC = bytes([0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A])

def stream(flags, values):
    return bytes([flags]) + b"".join(struct.pack(">H", len(v)) + v for v in values)

def chunks(data, size):
    return [data[i:i + size] for i in range(0, len(data), size)]

def retired_version1(payload):
    """A retired version-1 stream's first values: refused at once by a central that wrote a HELLO."""
    header = MAGIC + bytes([1]) + struct.pack(">QQ", SESSION, len(payload)) + hashlib.sha256(payload).digest()
    data = header + payload
    return [struct.pack(">H", i) + data[i * 18:(i + 1) * 18] for i in range((len(data) + 17) // 18)]

seeds = {
    "compat-text": stream(6, chunks("héllo wörld 日本 🎉".encode(), 20) + [b"EOM"]),
    "compat-empty": stream(6, [b"EOM"]),
    "compat-eom-split": stream(6, [b"EO", b"M", b"EOM"]),
    "retired-version-1": stream(6, retired_version1(b"hello, old world") + [b"EOM"]),
    "retired-hello": bytes([0x89, 0x42, 0x4C, 0x54, 0x48, 1]) + struct.pack(">Q", SESSION),
    "uuid": b"E20A39F4-73F5-4BC4-A12F-17D1AD07A961",
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
