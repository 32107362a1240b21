#!/usr/bin/env python3
"""Lab scenarios: a hostile central cannot hold `bletransfer send`.

A bleak central on b subscribes and then, after EOM, neither acknowledges (framed: it wrote a
HELLO) nor unsubscribes (Apple's flow), and keeps the link up. The sender must drop it at its
bound (`--ack-timeout`, `--unsubscribe-timeout`), say so (`central-dropped`), advertise again,
and deliver to the next central: `bletransfer receive` started on b once the hostile central
was dropped.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Context, scenario  # noqa: E402

BOUND = 8  # seconds: the scenario's --ack-timeout / --unsubscribe-timeout
HELLO = "89424c544801" + "00000000deadbeef"  # magic, version 1, session (docs/wire-formats.md, "Retired: framed version 1")


def hostile_then_receiver(ctx: Context, framed: bool) -> None:
    ctx.require_bletransfer()
    text = "for the real receiver, after the hostile central was dropped ✓"
    out = ctx.path("received")
    hello = f"--write-hello {HELLO} " if framed else ""
    hostile = ctx.central(None, extra=f"{hello}--hold-after-eom 120 --scan-timeout 60")
    option = "--ack-timeout" if framed else "--unsubscribe-timeout"
    res = ctx.lab.run(
        a=f'"$BLETRANSFER_BIN" send --json {option} {BOUND} --timeout 300 {shlex.quote(text)}',
        b=f'{hostile} && "$BLETRANSFER_BIN" receive --output {shlex.quote(out)} --timeout 200',
        b_after=("a", r'"event":"advertising"'), deadline=330,
        step="hostile central, then bletransfer receive", expect={"a": 0, "b": 0})
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    dropped = [json.loads(l) for l in a_out.splitlines() if '"event":"central-dropped"' in l]
    ctx.check(len(dropped) == 1, f"the sender dropped the hostile central once, saw {len(dropped)}")
    ctx.check(("ACK" in dropped[0]["reason"]) if framed else ("unsubscribe" in dropped[0]["reason"]),
              f"the reason names the bound: {dropped[0]['reason']!r}")
    m = re.search(r'^DROPPED (\{.*\})$', b_out, re.M)
    ctx.check(m is not None, "the hostile central saw its link dropped (it did not hold it for 120 s)")
    after = json.loads(m.group(1))["seconds_after_eom"]
    ctx.check(after <= BOUND + 6, f"dropped {after} s after EOM (bound {BOUND} s)")
    ctx.figure(f"hostile_{'framed' if framed else 'compat'}_dropped_after_s", after)
    ctx.check(ctx.read(out) == text.encode(), "the next central received the message")
    delivered = [l for l in a_out.splitlines() if '"event":"delivered"' in l]
    ctx.check(len(delivered) == 1 and '"format":"framed"' in delivered[0],
              "exactly one delivery, to the real (framed) receiver")
    ctx.check(len(re.findall(r'"event":"advertising"', a_out)) >= 2, "advertising resumed after the drop")


@scenario("bounds-central-never-acks", tags=("bletransfer", "bounds"))
def bounds_central_never_acks(ctx: Context):
    """A central that writes HELLO, takes the framed message and never ACKs is dropped at
    --ack-timeout; the next central is served."""
    hostile_then_receiver(ctx, framed=True)


@scenario("bounds-central-never-unsubscribes", tags=("bletransfer", "bounds"))
def bounds_central_never_unsubscribes(ctx: Context):
    """A central following Apple's flow that never unsubscribes after EOM is dropped at
    --unsubscribe-timeout, nothing is counted, and the next central is served."""
    hostile_then_receiver(ctx, framed=False)
