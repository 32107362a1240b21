#!/usr/bin/env python3
"""Calls methods on the objects a bletransfer process exports, from a D-Bus client that is not
org.bluez's owner, as any local process could: the advertisement's Release and the GATT
application's GetManagedObjects. Finds the process's connection through its pid.

Prints one line per call: CALL {"member": ..., "error": <D-Bus error name or null>}.
"""
import argparse
import asyncio
import json

from dbus_next import BusType, Message, MessageType
from dbus_next.aio import MessageBus


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, required=True)
    args = p.parse_args()
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()

    async def call(destination, path, interface, member, signature="", body=()):
        reply = await bus.call(Message(destination=destination, path=path, interface=interface, member=member,
                                       signature=signature, body=list(body)))
        return reply

    names = (await call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ListNames")).body[0]
    target = None
    for name in names:
        if not name.startswith(":"):
            continue
        reply = await call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                           "GetConnectionUnixProcessID", "s", [name])
        if reply.message_type == MessageType.METHOD_RETURN and reply.body[0] == args.pid:
            target = name
            break
    print("TARGET", json.dumps({"name": target}), flush=True)
    if target is None:
        return 1
    for path, interface, member in [
        ("/org/bletransfer/advertisement1", "org.bluez.LEAdvertisement1", "Release"),
        ("/org/bletransfer/app1", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"),
    ]:
        reply = await call(target, path, interface, member)
        error = reply.error_name if reply.message_type == MessageType.ERROR else None
        print("CALL", json.dumps({"member": f"{interface}.{member}", "path": path, "error": error}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
