#!/usr/bin/env python3
"""A hostile central for a bletransfer sender's L2CAP channel: connects over GATT (bleak), reads
the PSM the sender publishes, then opens the channel with l2test and misbehaves on it.

--mode silent: opens the channel and writes nothing, only reads (l2test -u).
--mode garbage: opens the channel, writes two 64-byte SDUs that are not a HELLO, then reads (l2test -y).

Prints PSM <n>, CHANNEL-OPENED, then CHANNEL-CLOSED <seconds after opening> once the sender
closed the channel (l2test saw the disconnection), and stays connected over GATT until then.
"""
import asyncio
import select
import subprocess
import sys
import time

from bleak import BleakClient, BleakScanner

from peer_common import argument_parser, say

PSM_CHARACTERISTIC = "d533dda4-55b7-4586-a003-91c8b75809f9"


async def main() -> int:
    p = argument_parser(__doc__)
    p.add_argument("--mode", choices=["silent", "garbage"], required=True)
    p.add_argument("--scan-timeout", type=float, default=60)
    p.add_argument("--hold", type=float, default=20, help="seconds to wait for the sender to close the channel")
    args = p.parse_args()
    want = args.service.lower()
    device = await BleakScanner.find_device_by_filter(
        lambda d, ad: want in [u.lower() for u in ad.service_uuids],
        timeout=args.scan_timeout, service_uuids=[args.service])
    if device is None:
        say("NOT-FOUND")
        return 2
    async with BleakClient(device) as client:
        value = await client.read_gatt_char(PSM_CHARACTERISTIC)
        psm = int.from_bytes(bytes(value), "little")
        say("PSM", psm)
        command = ["l2test", "-V", "le_public", "-P", str(psm)]
        command += ["-u"] if args.mode == "silent" else ["-y", "-N", "2", "-b", "64"]
        l2test = subprocess.Popen(command + [device.address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1)
        opened = None
        closed = None
        deadline = time.monotonic() + args.hold + 10
        while closed is None and time.monotonic() < deadline:
            ready, _, _ = select.select([l2test.stdout], [], [], 0.5)
            if not ready:
                continue
            line = l2test.stdout.readline()
            if not line:  # l2test exited: the channel is gone
                closed = time.monotonic() if opened is not None else None
                break
            sys.stdout.write("l2test: " + line)
            if "Connected to" in line and opened is None:
                opened = time.monotonic()
                say("CHANNEL-OPENED")
            elif opened is not None and any(w in line for w in ("Disconnect", "Read failed", "Exit", "failed")):
                closed = time.monotonic()
        l2test.kill()
        l2test.wait()
        if opened is not None and closed is not None:
            say("CHANNEL-CLOSED", round(closed - opened, 1))
        else:
            say("CHANNEL-NOT-CLOSED")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
