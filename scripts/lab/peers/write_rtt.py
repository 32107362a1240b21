#!/usr/bin/env python3
"""One GATT write and its answer, timed: a bless peripheral with a characteristic written with
response (`serve`), and a bleak central that writes it --count times, each after the last one's
answer, and prints how long each took (`measure`). On a radio a write goes out at a connection
event and its answer comes at a later one, so each takes at least one connection interval.

Lines on stdout: READY (serve); CONNECTED, RTT <json: samples_ms, median_ms, min_ms> (measure).
"""
import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import argument_parser, say  # noqa: E402

SERVICE = "5E1A7A6B-0C2D-4F3E-9A81-3C7D2E4B5F60"
CHARACTERISTIC = "5E1A7A6B-0C2D-4F3E-9A81-3C7D2E4B5F61"


async def serve(args):
    from bless import BlessServer, GATTAttributePermissions, GATTCharacteristicProperties
    server = BlessServer(name="lab-rtt", loop=asyncio.get_running_loop())
    await server.setup_task
    server.write_request_func = lambda characteristic, value, **_: None
    server.read_request_func = lambda characteristic, **_: characteristic.value
    await server.add_new_service(args.service)
    await server.add_new_characteristic(
        args.service, args.characteristic,
        GATTCharacteristicProperties.write | GATTCharacteristicProperties.read, bytearray(b"\0"),
        GATTAttributePermissions.readable | GATTAttributePermissions.writeable)
    await server.start()
    say("READY")
    await asyncio.Event().wait()


async def measure(args):
    from bleak import BleakClient, BleakScanner
    want = args.service.lower()
    device = await BleakScanner.find_device_by_filter(
        lambda d, ad: want in [u.lower() for u in ad.service_uuids], timeout=60, service_uuids=[args.service])
    if device is None:
        raise SystemExit(f"no peripheral advertising {args.service} within 60 s")
    async with BleakClient(device) as client:
        say("CONNECTED")
        # The first write waits for nothing of the connection's start-up (discovery is done).
        await client.write_gatt_char(args.characteristic, b"\x01", response=True)
        samples = []
        for i in range(args.count):
            started = time.monotonic()
            await client.write_gatt_char(args.characteristic, bytes([i & 0xFF]), response=True)
            samples.append(round((time.monotonic() - started) * 1000, 2))
    say("RTT", json.dumps({"samples_ms": samples, "median_ms": statistics.median(samples),
                           "min_ms": min(samples)}))


def main():
    p = argument_parser(__doc__)
    p.set_defaults(service=SERVICE, characteristic=CHARACTERISTIC)
    p.add_argument("mode", choices=("serve", "measure"))
    p.add_argument("--count", type=int, default=10, help="writes to time (measure)")
    args = p.parse_args()
    asyncio.run(serve(args) if args.mode == "serve" else measure(args))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
