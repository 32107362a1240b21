#!/usr/bin/env python3
"""A hostile peripheral for the bounds scenarios, built on bless (BlueZ over D-Bus).

It advertises the transfer service under --name (escape sequences welcome) and, each time a
central subscribes, misbehaves in one of two ways:

  --trickle SECONDS   compat: one --chunk-byte notification every SECONDS, never "EOM" (each
                      value resets an idle timer; only a bound that counts from the
                      subscription ends it).
  --announce BYTES    framed: answers the central's HELLO with a header announcing BYTES (a
                      random digest), then nothing more.

Lines on stdout (scenarios wait on them): READY, HELLO <json>, SUBSCRIBED, SENT <json>,
UNSUBSCRIBED.
"""
import asyncio
import json
import os
import sys

from bless import BlessServer, GATTAttributePermissions, GATTCharacteristicProperties

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apple_peripheral import _tolerate_full_socket  # noqa: E402
from peer_common import argument_parser, say  # noqa: E402

HELLO_MAGIC = bytes([0x89, 0x42, 0x4C, 0x54, 0x48])
HEADER_MAGIC = bytes([0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A])
FRAMED_VERSION = 1


def framed_header_values(session: bytes, announced: int, value_length: int = 20) -> list:
    """The header of bletransfer's framed format (magic, version, session, 64-bit length,
    SHA-256) cut into values of `value_length` bytes, each led by a 16-bit sequence number."""
    header = HEADER_MAGIC + bytes([FRAMED_VERSION]) + session + announced.to_bytes(8, "big") + os.urandom(32)
    piece = value_length - 2
    return [index.to_bytes(2, "big") + header[offset:offset + piece]
            for index, offset in enumerate(range(0, len(header), piece))]


def parse_args():
    p = argument_parser(__doc__)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--trickle", type=float, metavar="SECONDS")
    mode.add_argument("--announce", type=int, metavar="BYTES")
    p.add_argument("--chunk", type=int, default=20)
    p.add_argument("--name", default="lab-hostile")
    p.add_argument("--adapter", default=None)
    return p.parse_args()


async def main():
    args = parse_args()
    _tolerate_full_socket()
    loop = asyncio.get_running_loop()
    state = {"session": None, "task": None, "subscribed": False}

    kwargs = {"adapter": args.adapter} if args.adapter else {}
    server = BlessServer(name=args.name, loop=loop, **kwargs)
    await server.setup_task

    def notify(value: bytes):
        server.get_characteristic(args.characteristic).value = bytearray(value)
        server.update_value(args.service, args.characteristic)

    def on_write(characteristic, value, **_):
        value = bytes(value)
        # As a version-1 bletransfer peripheral reads a HELLO: version 1 or later, its first 14
        # bytes (a version-2 HELLO is 18 bytes long; docs/wire-v2.md, section 1).
        if len(value) >= 14 and value.startswith(HELLO_MAGIC) and value[5] >= 1:
            state["session"] = value[6:14]
            say("HELLO", json.dumps({"session": value[6:14].hex()}))
        else:
            say("WRITE", json.dumps({"bytes": len(value), "hex": value[:32].hex()}))

    server.write_request_func = on_write
    server.read_request_func = lambda characteristic, **_: characteristic.value

    async def misbehave():
        if args.trickle is not None:
            sent = 0
            while state["subscribed"]:
                notify(b"t" * args.chunk)
                sent += args.chunk
                say("SENT", json.dumps({"bytes": sent}))
                await asyncio.sleep(args.trickle)
        else:
            # The HELLO is written before the subscription; give a slow bus a moment.
            for _ in range(50):
                if state["session"] is not None:
                    break
                await asyncio.sleep(0.1)
            session = state["session"] or bytes(8)
            for value in framed_header_values(session, args.announce):
                notify(value)
            say("SENT", json.dumps({"announced": args.announce, "session": session.hex()}))

    def start_notify(_):
        say("SUBSCRIBED")
        state["subscribed"] = True
        if state["task"] is not None and not state["task"].done():
            state["task"].cancel()
        state["task"] = loop.create_task(misbehave())

    def stop_notify(_):
        say("UNSUBSCRIBED")
        state["subscribed"] = False

    server.app.StartNotify = start_notify
    server.app.StopNotify = stop_notify

    await server.add_new_service(args.service)
    await server.add_new_characteristic(
        args.service, args.characteristic,
        GATTCharacteristicProperties.notify | GATTCharacteristicProperties.write
        | GATTCharacteristicProperties.write_without_response,
        None,
        GATTAttributePermissions.readable | GATTAttributePermissions.writeable)
    await server.start()
    say("READY", json.dumps({"name": args.name}))
    await asyncio.Event().wait()  # until the scenario stops us


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
