#!/usr/bin/env python3
"""A third-party peripheral speaking the compat flow of Apple's "BTLE Transfer" sample, built on
bless (BlueZ over D-Bus).

It advertises the transfer service, serves one characteristic (notify, write-without-response)
and, each time a central subscribes, sends the message from byte 0 in --chunk-byte
notifications followed by one notification equal to b"EOM".

Lines on stdout (scenarios wait on them): READY, SUBSCRIBED, SENT <json>, WRITE <json>, DONE.
"""
import array
import socket
import asyncio
import hashlib
import json
import os
import sys
import time

from bless import BlessServer, GATTAttributePermissions, GATTCharacteristicProperties
import dbus_next.aio.message_bus as dbus_next_bus

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import EOM, argument_parser, say  # noqa: E402


def _tolerate_full_socket():
    """dbus-next (under bless) treats EAGAIN from a full bus socket as fatal and drops its
    connection, which a fast notification loop triggers. Replace its writer callback with one
    that leaves the unsent remainder in place and resumes when the socket is writable again."""
    writer = dbus_next_bus._MessageWriter

    def write_callback(self):
        try:
            while True:
                if self.buf is None:
                    if self.messages.qsize() == 0:
                        self.loop.remove_writer(self.fd)
                        return
                    buf, self.unix_fds, self.fut = self.messages.get_nowait()
                    self.buf, self.offset = memoryview(buf), 0
                try:
                    if self.unix_fds and self.negotiate_unix_fd:
                        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", self.unix_fds))]
                        self.offset += self.sock.sendmsg([self.buf[self.offset:]], rights)
                        self.unix_fds = None
                    else:
                        self.offset += self.sock.send(self.buf[self.offset:])
                except BlockingIOError:
                    return  # still registered as writer: called again once the socket drains
                if self.offset < len(self.buf):
                    return
                self.buf = None
                if self.fut is not None and not self.fut.done():
                    self.fut.set_result(None)
        except Exception as e:
            if self.fut is not None and not self.fut.done():
                self.fut.set_exception(e)
            self.bus._finalize(e)

    writer.write_callback = write_callback


def parse_args():
    p = argument_parser(__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--message", help="text to send (UTF-8)")
    src.add_argument("--message-file", help="file whose bytes are sent")
    p.add_argument("--chunk", type=int, default=20, help="bytes per notification (Apple's sample: 20)")
    p.add_argument("--count", type=int, default=1,
                   help="exit after this many complete sends (0 = serve forever)")
    p.add_argument("--name", default="lab-peripheral", help="advertised local name")
    p.add_argument("--adapter", default=None, help="hciN (default: first adapter)")
    p.add_argument("--linger", type=float, default=2.0,
                   help="seconds to stay up after the last send so it is delivered")
    return p.parse_args()


async def main():
    args = parse_args()
    _tolerate_full_socket()
    message = args.message.encode() if args.message is not None else open(args.message_file, "rb").read()
    digest = hashlib.sha256(message).hexdigest()
    loop = asyncio.get_running_loop()
    subscribed = asyncio.Event()
    state = {"sender": None, "sent": 0}
    done = asyncio.Event()

    kwargs = {"adapter": args.adapter} if args.adapter else {}
    server = BlessServer(name=args.name, loop=loop, **kwargs)
    await server.setup_task

    def on_write(characteristic, value, **_):
        say("WRITE", json.dumps({"bytes": len(value), "hex": bytes(value[:32]).hex()}))

    server.write_request_func = on_write
    server.read_request_func = lambda characteristic, **_: characteristic.value

    async def send_message():
        started = time.monotonic()
        n = 0
        for offset in range(0, len(message), args.chunk):
            server.get_characteristic(args.characteristic).value = bytearray(message[offset:offset + args.chunk])
            server.update_value(args.service, args.characteristic)
            n += 1
            # Back-pressure: let the bus connection drain before queueing more (the analogue of
            # waiting for peripheralManagerIsReadyToUpdateSubscribers).
            writer = server.bus._writer
            while writer.messages.qsize() > 32:
                await asyncio.sleep(0.001)
            if n % 16 == 0:
                await asyncio.sleep(0)
            if not subscribed.is_set():
                say("ABORTED", json.dumps({"sent_bytes": offset, "reason": "unsubscribed"}))
                return
        server.get_characteristic(args.characteristic).value = bytearray(EOM)
        server.update_value(args.service, args.characteristic)
        seconds = time.monotonic() - started
        state["sent"] += 1
        say("SENT", json.dumps({"bytes": len(message), "notifications": n + 1, "seconds": round(seconds, 3),
                                "kib_s": round(len(message) / 1024 / max(seconds, 1e-6), 1),
                                "sha256": digest, "index": state["sent"]}))
        if args.count and state["sent"] >= args.count:
            done.set()

    def start_notify(_):
        say("SUBSCRIBED")
        subscribed.set()
        if state["sender"] is not None and not state["sender"].done():
            state["sender"].cancel()
        state["sender"] = loop.create_task(send_message())

    def stop_notify(_):
        say("UNSUBSCRIBED")
        subscribed.clear()

    server.app.StartNotify = start_notify
    server.app.StopNotify = stop_notify

    await server.add_new_service(args.service)
    await server.add_new_characteristic(
        args.service, args.characteristic,
        GATTCharacteristicProperties.notify | GATTCharacteristicProperties.write_without_response,
        None,
        GATTAttributePermissions.readable | GATTAttributePermissions.writeable)
    await server.start()
    say("READY", json.dumps({"bytes": len(message), "sha256": digest, "chunk": args.chunk}))
    await done.wait()
    await asyncio.sleep(args.linger)
    try:
        await asyncio.wait_for(server.stop(), 5)
    except Exception as e:  # the adapter may be gone in fault scenarios; exit anyway
        say("STOP-FAILED", repr(e))
    say("DONE")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
