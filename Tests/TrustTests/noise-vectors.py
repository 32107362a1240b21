#!/usr/bin/env python3
"""Known answers for NoiseXXTests: runs Noise_XX_25519_ChaChaPoly_SHA256 with fixed keys,
prologue and payloads through the independent Python implementation `noiseprotocol` (PyPI,
0.3.1) and prints the messages, the handshake hash and two transport messages each way as hex.

    python3 -m venv /tmp/noise && /tmp/noise/bin/pip install noiseprotocol==0.3.1
    /tmp/noise/bin/python Tests/TrustTests/noise-vectors.py

NoiseXXTests.swift holds this output; rerun to check it after changing the vectors below."""
from noise.connection import NoiseConnection, Keypair

NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"
INIT_STATIC = bytes(range(0x00, 0x20))
INIT_EPHEMERAL = bytes(range(0x20, 0x40))
RESP_STATIC = bytes(range(0x01, 0x21))
RESP_EPHEMERAL = bytes(range(0x41, 0x61))
PROLOGUE = b"bletransfer framed v2"
PAYLOADS = [b"", b"responder says hi", b"initiator's payload"]
TRANSPORT = [b"first record", b"second record"]


def party(initiator, static, ephemeral):
    conn = NoiseConnection.from_name(NAME)
    conn.set_as_initiator() if initiator else conn.set_as_responder()
    conn.set_prologue(PROLOGUE)
    conn.set_keypair_from_private_bytes(Keypair.STATIC, static)
    conn.set_keypair_from_private_bytes(Keypair.EPHEMERAL, ephemeral)
    conn.start_handshake()
    return conn


init = party(True, INIT_STATIC, INIT_EPHEMERAL)
resp = party(False, RESP_STATIC, RESP_EPHEMERAL)
writers = [init, resp, init]
readers = [resp, init, resp]
for index, payload in enumerate(PAYLOADS):
    message = writers[index].write_message(payload)
    assert readers[index].read_message(message) == payload
    print(f"message{index + 1} = {message.hex()}")
assert init.handshake_finished and resp.handshake_finished
print(f"handshake_hash = {init.get_handshake_hash().hex()}")
for index, payload in enumerate(TRANSPORT):
    print(f"initiator_transport{index + 1} = {init.encrypt(payload).hex()}")
for index, payload in enumerate(TRANSPORT):
    print(f"responder_transport{index + 1} = {resp.encrypt(payload).hex()}")
