#!/usr/bin/env python3
"""A third-party central speaking the compat flow of Apple's "BTLE Transfer" sample, built on
bleak (BlueZ over D-Bus).

For each of --count messages: scan for the transfer service, connect, subscribe to the
characteristic, append notifications until one equals b"EOM", unsubscribe, disconnect; then
scan again. Each message is written to --output (with ".N" appended when --count > 1) or, for
text, printed.

Lines on stdout: SCANNING, FOUND <addr>, CONNECTED, SUBSCRIBED, FIRST-VALUE, RECEIVED <json>, TEXT <text>.
"""
import asyncio
import hashlib
import json
import os
import sys
import time

from bleak import BleakClient, BleakScanner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import EOM, argument_parser, say  # noqa: E402


def parse_args():
    p = argument_parser(__doc__)
    p.add_argument("--count", type=int, default=1, help="messages to receive")
    p.add_argument("--output", help="file for the received bytes ('.N' appended when --count > 1)")
    p.add_argument("--print-text", action="store_true", help="print each message as UTF-8 text")
    p.add_argument("--scan-timeout", type=float, default=60)
    p.add_argument("--message-timeout", type=float, default=600,
                   help="seconds from subscription to EOM before giving up")
    p.add_argument("--attempts", type=int, default=5, help="connect attempts per message")
    p.add_argument("--adapter", default=None, help="hciN (default: first adapter)")
    p.add_argument("--retry-for", type=float, default=0,
                   help="on a disconnect or failure mid-message, discard the partial data, scan "
                        "again and retry for up to this many seconds (Apple's central rescans)")
    p.add_argument("--hold-after-eom", type=float, default=0,
                   help="hostile: after EOM neither acknowledge nor unsubscribe; wait up to this many seconds "
                        "for the peripheral to drop the link (prints DROPPED or HELD)")
    p.add_argument("--record", default=None,
                   help="append every notified value, as received, to this file (also values of a "
                        "message that never completes): what a third party got from the peripheral")
    p.add_argument("--write-hello", default=None,
                   help="hex bytes written (as a write request, answered before subscribing, as "
                        "docs/wire-v2.md asks of a central) before subscribing; Apple's central writes nothing")
    return p.parse_args()


class Disconnected(Exception):
    pass


async def receive_one(args, index):
    want = args.service.lower()
    kwargs = {"adapter": args.adapter} if args.adapter else {}
    say("SCANNING")
    device = await BleakScanner.find_device_by_filter(
        lambda d, ad: want in [u.lower() for u in ad.service_uuids],
        timeout=args.scan_timeout, service_uuids=[args.service], **kwargs)
    if device is None:
        raise RuntimeError(f"no peripheral advertising {args.service} within {args.scan_timeout}s")
    say("FOUND", device.address)
    disconnected = asyncio.Event()
    client = BleakClient(device, disconnected_callback=lambda _: disconnected.set(), **kwargs)
    for attempt in range(1, args.attempts + 1):
        try:
            await client.connect()
            break
        except Exception as e:  # transient: InProgress, le-connection-abort-by-local
            say("CONNECT-FAILED", attempt, repr(e))
            if attempt == args.attempts:
                raise
            await asyncio.sleep(0.5 * attempt)
    say("CONNECTED", json.dumps({"mtu": client.mtu_size}))
    data = bytearray()
    complete = asyncio.Event()
    notifications = 0
    first = [None]

    def on_notify(_, value: bytearray):
        nonlocal notifications
        if complete.is_set():
            return
        notifications += 1
        if args.record:
            with open(args.record, "ab") as f:
                f.write(bytes(value))
        if first[0] is None:
            first[0] = time.monotonic()
            say("FIRST-VALUE")
        if bytes(value) == EOM:
            complete.set()
        else:
            data.extend(value)

    try:
        if args.write_hello:
            # A request, not a command: with EATT the command and the subscription can reach the
            # sender in either order, and a subscription first is served Apple's flow.
            await client.write_gatt_char(args.characteristic, bytes.fromhex(args.write_hello), response=True)
        started = time.monotonic()
        await client.start_notify(args.characteristic, on_notify)
        say("SUBSCRIBED")
        waiters = [asyncio.ensure_future(complete.wait()), asyncio.ensure_future(disconnected.wait())]
        done, pending = await asyncio.wait(waiters, timeout=args.message_timeout,
                                           return_when=asyncio.FIRST_COMPLETED)
        for w in pending:
            w.cancel()
        if not complete.is_set():
            if disconnected.is_set():
                raise Disconnected(f"disconnected after {len(data)} bytes")
            raise TimeoutError(f"no EOM within {args.message_timeout}s ({len(data)} bytes so far)")
        seconds = time.monotonic() - (first[0] or started)
        if args.hold_after_eom > 0:
            eom_at = time.monotonic()
            try:
                await asyncio.wait_for(disconnected.wait(), args.hold_after_eom)
                say("DROPPED", json.dumps({"seconds_after_eom": round(time.monotonic() - eom_at, 2)}))
            except asyncio.TimeoutError:
                say("HELD", json.dumps({"seconds_after_eom": args.hold_after_eom}))
                raise SystemExit(3)
            return
        try:
            await client.stop_notify(args.characteristic)
        except Exception as e:
            say("UNSUBSCRIBE-FAILED", repr(e))
    finally:
        try:
            await asyncio.wait_for(client.disconnect(), 20)
        except Exception as e:
            say("DISCONNECT-FAILED", repr(e))
    result = {"index": index, "bytes": len(data), "notifications": notifications,
              "seconds": round(seconds, 3), "kib_s": round(len(data) / 1024 / max(seconds, 1e-6), 1),
              "sha256": hashlib.sha256(data).hexdigest(), "peer": device.address}
    if args.output:
        path = args.output if args.count == 1 else f"{args.output}.{index}"
        with open(path, "wb") as f:
            f.write(data)
        result["output"] = path
    say("RECEIVED", json.dumps(result))
    if args.print_text:
        say("TEXT", data.decode("utf-8", errors="replace"))


async def main():
    args = parse_args()
    for index in range(1, args.count + 1):
        give_up = time.monotonic() + args.retry_for
        while True:
            try:
                await receive_one(args, index)
                break
            except Exception as e:
                if time.monotonic() >= give_up:
                    raise
                say("RETRY", json.dumps({"index": index, "reason": str(e) or repr(e)}))
                await asyncio.sleep(1)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        print(f"apple_central: {e}", file=sys.stderr)
        sys.exit(1)
