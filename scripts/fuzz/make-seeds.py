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

def sequenced(data, value_size, first=0):
    """Framed values: each piece of value_size - 2 bytes behind its 2-byte sequence number."""
    return [struct.pack(">H", (first + i) & 0xFFFF) + piece for i, piece in enumerate(chunks(data, value_size - 2))]

def swapped(values, pairs):
    values = list(values)
    for a, b in pairs:
        values[a], values[b] = values[b], values[a]
    return values

def framed(payload, session=SESSION, version=1, length=None):
    header = MAGIC + bytes([version]) + struct.pack(">QQ", session, len(payload) if length is None else length)
    return header + hashlib.sha256(payload).digest() + payload

seeds = {
    "compat-text": stream(6, chunks("héllo wörld 日本 🎉".encode(), 20) + [b"EOM"]),
    "compat-empty": stream(6, [b"EOM"]),
    "compat-eom-split": stream(6, [b"EO", b"M", b"EOM"]),
    "framed-small": stream(7, sequenced(framed(b"hello, framed world"), 20) + [b"EOM"]),
    "framed-empty": stream(7, sequenced(framed(b""), 20) + [b"EOM"]),
    "framed-wide": stream(7, sequenced(framed(bytes(range(200))), 182) + [b"EOM"]),
    "framed-long-header": stream(7, sequenced(framed(b"x" * 10, length=5000), 20) + [b"EOM"]),
    "framed-other-session": stream(7, sequenced(framed(b"abc", session=1), 20) + [b"EOM"]),
    "framed-v2": stream(7, sequenced(framed(b"abc", version=2), 20) + [b"EOM"]),
    # Reordered as EATT delivers them: EOM overtaking, the first value late, neighbours swapped.
    "framed-reordered": stream(7, swapped(sequenced(framed(b"reordered " * 12), 20) + [b"EOM"], [(0, 2), (5, 9), (6, 7)])),
    "framed-eom-first": stream(7, [b"EOM"] + sequenced(framed(b"hi"), 182)),
    "framed-missing-value": stream(7, [v for i, v in enumerate(sequenced(framed(b"m" * 100), 20)) if i != 3] + [b"EOM"]),
    "framed-duplicate": stream(7, sequenced(framed(b"d" * 60), 20)[:4] * 2 + [b"EOM"]),
    "compat-after-hello-lookalike": stream(7, [bytes([0, i]) + bytes(18) for i in range(1, 6)] + [b"EOM"]),
    "hello": bytes([0x89, 0x42, 0x4C, 0x54, 0x48, 1]) + struct.pack(">Q", SESSION),
    "ack": bytes([0x89, 0x42, 0x4C, 0x54, 0x41, 1]) + struct.pack(">Q", SESSION) + bytes(6),
    "uuid": b"E20A39F4-73F5-4BC4-A12F-17D1AD07A961",
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
