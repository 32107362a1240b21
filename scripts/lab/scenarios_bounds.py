#!/usr/bin/env python3
"""Lab scenarios for the receiver's bounds and the local D-Bus boundary (BLETRANSFER_BIN).

Loaded by scenarios.py with every other scenarios_*.py module; `python3 scenarios.py --tag
bounds` runs only these. The hostile peers are the lab's own scripts (peers/hostile_peripheral.py,
a bless peripheral that trickles or announces too much; peers/dbus_intruder.py, a local D-Bus
client): nothing is mocked.
"""
from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Context, scenario, sha256  # noqa: E402
from lab_events import json_events, peer_events  # noqa: E402

BIN = '"$BLETRANSFER_BIN"'
HOSTILE = '"$LAB_PYTHON" "$LAB_PEERS/hostile_peripheral.py"'
INTRUDER = '"$LAB_PYTHON" "$LAB_PEERS/dbus_intruder.py"'
# A local name with a colour change and a window-title change (OSC ... BEL) in it.
EVIL_NAME = r"$'ev\e[31mIL\e]0;x\a'"


def wait_for(ctx: Context, job, pattern: str, deadline: float, what: str, stream: str = "output") -> float:
    """Waits until the job's output matches `pattern`; returns when (monotonic)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline:
        text = getattr(job, stream)()
        if re.search(pattern, text, re.M):
            return time.monotonic()
        if job.poll() is not None:
            break
        time.sleep(0.25)
    ctx.check(False, f"{what}: /{pattern}/ not seen within {deadline:g} s ({job.describe() if job.rc is not None else 'running'})")
    return 0.0


def stop(ctx: Context, job) -> None:
    if job.poll() is None:
        ctx.lab._kill(job)
        job.stopped = True
        job.wait()


@scenario("bounds-trickle", tags=("bletransfer", "bounds", "peers", "extended"), conf="channels1")
def bounds_trickle(ctx: Context):
    """A bless peripheral on a named with escape sequences trickles 20 bytes every 4 s (never
    EOM): receive on b (--min-rate 40) drops it within its bound, prints the name escaped, and
    then receives a real sender's message from a."""
    ctx.require_bletransfer()
    data = ("a real message after a hostile one ✓ " * 20).encode()
    msg = ctx.payload("message", data)
    inbox = ctx.path("inbox")
    receiver = ctx.lab.start("b", f"{BIN} receive --verbose --min-rate 40 --output-dir {shlex.quote(inbox)} "
                                  f"--count 1 --timeout 420", step="receive", deadline=450)
    hostile = ctx.lab.start("a", f"{HOSTILE} --trickle 4 --name {EVIL_NAME}", step="trickle", deadline=400)
    try:
        subscribed = wait_for(ctx, hostile, r"^SUBSCRIBED", 240, "the receiver subscribed to the trickler")
        refused = wait_for(ctx, receiver, r"refused .*\(min-rate\)", 120, "the trickler was refused", "stderr")
        ctx.figure("trickle_dropped_after_s", round(refused - subscribed, 1))
        # Bound: 20 s grace, then 40 B/s owed against 5 B/s received: about 23 s (+ polling).
        ctx.check(refused - subscribed < 45, f"dropped {refused - subscribed:.1f} s after subscribing (bound ~23 s)")
    finally:
        stop(ctx, hostile)
    sender = ctx.lab.start("a", f"{BIN} send --json --file {shlex.quote(msg)} --timeout 300", step="send", deadline=330)
    receiver.wait()
    stop(ctx, sender)
    ctx.check(receiver.rc == 0, f"the receiver then got the real message (exit {receiver.rc})")
    listing = ctx.lab.sh("b", f"ls -A {shlex.quote(inbox)}", step="inbox listing").stdout().split()
    ctx.check(len(listing) == 1 and ctx.read(f"{inbox}/{listing[0]}") == data, f"the inbox holds the message: {listing}")
    err = receiver.stderr()
    ctx.check("\x1b" not in err and "\x07" not in err, "no raw ESC or BEL reached the receiver's output")
    ctx.check("\\x1b[31mIL" in err, "the device name was printed escaped (\\x1b[31mIL)")


@scenario("bounds-reserve", tags=("bletransfer", "bounds", "extended"))
def bounds_reserve(ctx: Context):
    """receive on b into a 4 MiB tmpfs with --reserve 2 MiB; send on a offers 2.5 MiB: refused
    when its header announces the length (nothing stored, no ACK), so the sender delivered
    nothing and keeps the message; a 1 KiB message right after is received."""
    ctx.require_bletransfer()
    big = ctx.payload("big", bytes(range(256)) * (10 * 1024))  # 2.5 MiB
    small_data = b"fits within the reserve\n" * 40
    small = ctx.payload("small", small_data)
    mount = "/run/bletransfer-bounds-inbox"
    ctx.lab.sh("b", f"umount {mount} 2>/dev/null; mkdir -p {mount} && mount -t tmpfs -o size=4m tmpfs {mount}",
               step="tmpfs")
    try:
        # The first visit is refused within seconds; the rest of the run shows the back-off.
        res = ctx.lab.run(a=f"{BIN} send --json --file {shlex.quote(big)} --timeout 30",
                          b=f"{BIN} receive --json --output-dir {mount} --reserve 2097152 --timeout 33",
                          b_after=("a", r'"event":"advertising"'), deadline=70, step="2.5 MiB into 4 MiB - 2 MiB",
                          expect={"a": 75, "b": 75})
        refused = json_events(res.job("b").stdout(), "refused")
        ctx.check(bool(refused) and all(e["bound"] == "reserve" for e in refused),
                  f"refused for the reserve: {[e.get('reason') for e in refused][:2]}")
        ctx.figure("reserve_refusals", len(refused))
        ctx.check(not json_events(res.job("b").stdout(), "received"), "nothing was received")
        ctx.check(not json_events(res.job("a").stdout(), "delivered"),
                  "the sender delivered nothing (no ACK): it keeps the message")
        progress = [e for e in json_events(res.job("b").stdout(), "progress") if e.get("bytes", 0) > 4096]
        ctx.check(not progress, "refused before the payload came: no progress beyond the header")
        listing = ctx.lab.sh("b", f"ls -A {mount}", step="inbox listing").stdout().split()
        ctx.check(listing == [], f"the inbox is empty: {listing}")
        ctx.lab.run(a=f"{BIN} send --json --file {shlex.quote(small)} --timeout 200",
                    b=f"{BIN} receive --json --output-dir {mount} --reserve 2097152 --timeout 200",
                    b_after=("a", r'"event":"advertising"'), deadline=230, step="1 KiB fits")
        listing = ctx.lab.sh("b", f"ls -A {mount}", step="inbox listing").stdout().split()
        ctx.check(len(listing) == 1, f"the small message was stored: {listing}")
        # The tmpfs is the guest's own: compare there.
        digest = ctx.lab.sh("b", f"sha256sum {mount}/{listing[0]}", step="digest").stdout().split()[0]
        ctx.check(digest == sha256(small_data), "the stored message is the one sent")
    finally:
        ctx.lab.sh("b", f"umount {mount}", step="umount", check=False)


@scenario("bounds-max-size", tags=("bletransfer", "bounds", "peers", "extended"), conf="channels1")
def bounds_max_size(ctx: Context):
    """--max-size of 2^63-1 is a usage error (64); receive on b to standard output with --max-size
    of a quarter of its memory meets a peripheral answering in the retired framed version 1 with a
    header announcing 2^64-1 bytes: it refuses it at the first value with one line naming version 1
    (nothing allocated, nothing stored, no trap) and runs until its --timeout (75)."""
    ctx.require_bletransfer()
    huge = ctx.lab.sh("b", f"{BIN} receive --max-size 9223372036854775807; echo rc=$?", step="--max-size Int.max",
                      check=False)
    ctx.check("rc=64" in huge.output() and "--max-size" in huge.stderr(), f"usage error: {huge.output()[-300:]}")
    maximum = ctx.lab.sh("b", "awk '/MemTotal/ {print int($2 * 1024 / 4) - 65536}' /proc/meminfo",
                         step="maximum").stdout().strip()
    res = ctx.lab.run(a=f"{HOSTILE} --announce 18446744073709551615",
                      b=f"{BIN} receive --json --max-size {maximum} --timeout 30",
                      b_after=("a", r"^READY"), deadline=90, step="announce 2^64-1", finish_with="b",
                      expect={"b": 75})
    ctx.figure("max_size_bytes", int(maximum))
    out = res.job("b").output()
    refused = json_events(res.job("b").stdout(), "refused")
    ctx.check(bool(refused) and all(r.get("bound") == "framed-version" for r in refused),
              f"refused as framed version 1: {refused} {out[-400:]}")
    ctx.check(any("framed version 1" in r.get("reason", "") for r in refused), f"the refusal says why: {out[-400:]}")
    ctx.check(not json_events(res.job("b").stdout(), "received"), "nothing was received")


@scenario("bounds-dbus-intruder", tags=("bletransfer", "bounds"))
def bounds_dbus_intruder(ctx: Context):
    """send on a; a local D-Bus client on a calls the advertisement's Release and the
    application's GetManagedObjects: both AccessDenied, and receive on b still gets the message."""
    ctx.require_bletransfer()
    text = "still advertising after a forged Release"
    sender = ctx.lab.start("a", f"{BIN} send --json {shlex.quote(text)} --timeout 300", step="send", deadline=330)
    try:
        wait_for(ctx, sender, r'"event":"advertising"', 120, "the sender advertises")
        intruder = ctx.lab.sh("a", f"{INTRUDER} --pid $(pgrep -n -x bletransfer)", step="intruder", check=False)
        calls = peer_events(intruder.stdout(), "CALL")
        ctx.check(len(calls) == 2 and all(c["error"] == "org.freedesktop.DBus.Error.AccessDenied" for c in calls),
                  f"every call refused with AccessDenied: {calls} {intruder.stderr()[-300:]}")
        out = ctx.path("received")
        ctx.lab.sh("b", f"{BIN} receive --output {shlex.quote(out)} --timeout 240", step="receive", deadline=270)
        ctx.check(ctx.read(out) == text.encode(), "the receiver got the message: advertising was not disturbed")
        sender.wait()
        ctx.check(sender.rc == 0, f"the sender delivered and exited 0 ({sender.describe()})")
        ctx.check("refused a D-Bus call" in sender.stderr(), "the sender logged the refused caller")
    finally:
        stop(ctx, sender)


@scenario("bounds-channel-intruder", tags=("bletransfer", "bounds", "l2cap", "peers"))
def bounds_channel_intruder(ctx: Context):
    """send on a publishes its L2CAP channel. From b, a bleak central connects over GATT, reads
    the PSM and opens the channel with l2test: once writing nothing, once writing two SDUs of
    garbage; and l2test opens it with no GATT connection at all. The sender closes each channel
    with one line naming b (no HELLO within 5 s; not a HELLO; not a known connection) and keeps
    serving: receive on b then gets the message over the channel."""
    ctx.require_bletransfer()
    text = "served after three intruders on the channel"
    intruder = '"$LAB_PYTHON" "$LAB_PEERS/channel_intruder.py"'
    sender = ctx.lab.start("a", f"{BIN} send --verbose {shlex.quote(text)} --timeout 400", step="send", deadline=430)
    try:
        wait_for(ctx, sender, r"L2CAP channel on PSM \d+", 120, "the sender listens on a PSM", "stderr")
        psm = re.search(r"L2CAP channel on PSM (\d+)", sender.stderr()).group(1)
        a_addr = ctx.lab.sh("a", "lab_address", step="address of a").stdout().strip()
        b_addr = ctx.lab.sh("b", "lab_address", step="address of b").stdout().strip()
        silent = ctx.lab.sh("b", f"{intruder} --mode silent --hold 20", step="silent intruder", check=False, deadline=120)
        ctx.check("CHANNEL-OPENED" in silent.stdout(), f"the silent intruder opened the channel: {silent.stdout()[-300:]}")
        m = re.search(r"CHANNEL-CLOSED ([0-9.]+)", silent.stdout())
        if m:  # what l2test saw (it does not always report the close it does not read)
            ctx.figure("channel_silent_intruder_closed_after_s", float(m.group(1)))
        wait_for(ctx, sender, r"dropped central .*wrote no HELLO within 5 s", 30, "the silent intruder was dropped", "stderr")
        ctx.lab.sh("b", f"{intruder} --mode garbage --hold 10", step="garbage intruder", check=False, deadline=120)
        wait_for(ctx, sender, r"dropped central .*without a framed version 2 HELLO", 30,
                 "the garbage intruder was dropped", "stderr")
        # Without GATT first: bluetoothd may not know the link yet (refused at once) or know it
        # by the time the channel is read (refused after 5 s without a HELLO).
        ctx.lab.sh("b", f"timeout 20 l2test -n -V le_public -P {psm} {a_addr}; true", step="intruder without GATT",
                   check=False, deadline=40)
        def channel_drops() -> list:
            return [line for line in sender.stderr().splitlines() if "dropped central" in line and "L2CAP" in line]
        t0 = time.monotonic()
        while len(channel_drops()) < 3 and time.monotonic() - t0 < 30:
            time.sleep(0.25)
        drops = channel_drops()
        ctx.check(len(drops) >= 3 and re.search("not a GATT client|wrote no HELLO", drops[-1]) is not None,
                  f"the intruder without GATT was dropped: {drops[-1:]}")
        ctx.check(len(drops) == 3 and all(b_addr in line for line in drops),
                  f"one line for each intruder, naming b ({b_addr}): {drops}")
        res = ctx.lab.run(b=f"{BIN} receive --json --timeout 120", deadline=150, step="receive after the intruders")
        out = res.job("b").stdout()
        got = [e for e in json_events(out, "received")]
        ctx.check(len(got) == 1 and got[0].get("text") == text, f"the honest receiver got the message: {got}")
        ctx.check(any(e.get("transport") == "l2cap" for e in json_events(out, "subscribed")),
                  "over the L2CAP channel")
        sender.wait()
        ctx.check(sender.rc == 0, f"the sender delivered and exited 0 (exit {sender.rc})")
    finally:
        stop(ctx, sender)
