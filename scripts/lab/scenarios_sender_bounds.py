#!/usr/bin/env python3
"""Lab scenarios: a hostile central cannot hold `bletransfer send`.

A bleak central on b subscribes and then either never answers the handshake (framed: it wrote
a HELLO offering the encrypted session, and nobody is authenticated before its answer) or, after
EOM, never unsubscribes (Apple's flow), and keeps the link up. The sender must drop it at its
bound (the handshake's 10 s, `--unsubscribe-timeout`), say so (`central-dropped`), advertise
again, and deliver to the next central: `bletransfer receive` started on b once the hostile
central was dropped.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Context, scenario  # noqa: E402
from lab_events import epoch_seconds, event_lines, json_events, peer_events  # noqa: E402

BOUND = 8  # seconds: the scenario's --unsubscribe-timeout
HANDSHAKE_BOUND = 10  # seconds: the sender's bound on an unanswered handshake
# magic, version 2, session, capabilities: `secure` (docs/wire-v2.md, section 1)
HELLO = "89424c5448" + "02" + "00000000deadbeef" + "00000001"
# The retired framed version 1's HELLO: magic, version 1, session (docs/wire-formats.md)
HELLO_V1 = "89424c5448" + "01" + "00000000deadbeef"


def hostile_then_receiver(ctx: Context, framed: bool, version1: bool = False) -> None:
    ctx.require_bletransfer()
    text = "for the real receiver, after the hostile central was dropped ✓"
    out = ctx.path("received")
    if framed:
        # It waits for an EOM that never comes; the sender's drop ends its wait (exit non-zero).
        hello = HELLO_V1 if version1 else HELLO
        hostile = ctx.central(None, extra=f"--write-hello {hello} --message-timeout 120 --scan-timeout 60")
        option = ""
    else:
        hostile = ctx.central(None, extra="--hold-after-eom 120 --scan-timeout 60")
        option = f"--unsubscribe-timeout {BOUND}"
    joiner = ";" if framed else "&&"
    res = ctx.lab.run(
        a=f'"$BLETRANSFER_BIN" send --json {option} --timeout 300 {shlex.quote(text)}',
        b=f'{hostile} {joiner} "$BLETRANSFER_BIN" receive --output {shlex.quote(out)} --timeout 200',
        b_after=("a", r'"event":"advertising"'), deadline=330,
        step="hostile central, then bletransfer receive", expect={"a": 0, "b": 0})
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    dropped = json_events(a_out, "central-dropped")
    ctx.check(len(dropped) == 1, f"the sender dropped the hostile central once, saw {len(dropped)}")
    reason = dropped[0]["reason"] if dropped else ""
    expected = "framed version 1" if version1 else "handshake" if framed else "unsubscribe"
    ctx.check(expected in reason, f"the reason names the bound: {reason!r}")
    if version1:
        # Refused as it subscribed: no handshake, not one value, one line.
        ctx.check("update bletransfer" in reason, f"the line says what to do: {reason!r}")
        ctx.check(not json_events(a_out, "subscribed") or len(json_events(a_out, "subscribed")) == 1,
                  "only the real receiver was served")
        after = 0.0
    elif framed:
        # From the hostile central's subscription to its drop, by the sender's own clock.
        subscribed = next(iter(json_events(a_out, "subscribed")), None)
        ctx.check(subscribed is not None, "the hostile central subscribed")
        after = epoch_seconds(dropped[0]["time"]) - epoch_seconds(subscribed["time"]) if subscribed else 1e9
        ctx.check(after <= HANDSHAKE_BOUND + 6, f"dropped {after:.1f} s after subscribing (bound {HANDSHAKE_BOUND} s)")
    else:
        seen = peer_events(b_out, "DROPPED")
        ctx.check(bool(seen), "the hostile central saw its link dropped (it did not hold it for 120 s)")
        after = seen[0]["seconds_after_eom"] if seen else 1e9
        ctx.check(after <= BOUND + 6, f"dropped {after} s after EOM (bound {BOUND} s)")
    if not version1:
        ctx.figure(f"hostile_{'framed' if framed else 'compat'}_dropped_after_s", after)
    ctx.check(ctx.read(out) == text.encode(), "the next central received the message")
    delivered = event_lines(a_out, "delivered")
    ctx.check(len(delivered) == 1 and '"format":"secure"' in delivered[0],
              "exactly one delivery, to the real (encrypted framed) receiver")
    if not version1:
        # A refused version-1 central was never served, so advertising never paused for it.
        ctx.check(len(event_lines(a_out, "advertising")) >= 2, "advertising resumed after the drop")


@scenario("bounds-central-never-acks", tags=("bletransfer", "bounds"))
def bounds_central_never_acks(ctx: Context):
    """A central that writes a HELLO and never answers the handshake is dropped within the
    handshake's bound (seconds, not the message's transfer deadline); the next central is served."""
    hostile_then_receiver(ctx, framed=True)


@scenario("bounds-central-never-unsubscribes", tags=("bletransfer", "bounds", "extended"))
def bounds_central_never_unsubscribes(ctx: Context):
    """A central following Apple's flow that never unsubscribes after EOM is dropped at
    --unsubscribe-timeout, nothing is counted, and the next central is served."""
    hostile_then_receiver(ctx, framed=False)


@scenario("bounds-central-version1", tags=("bletransfer", "bounds", "extended"))
def bounds_central_version1(ctx: Context):
    """A central offering the retired framed version 1 (its HELLO, then a subscription) gets one
    `central-dropped` line naming version 1 and not one value; the next central is served."""
    hostile_then_receiver(ctx, framed=True, version1=True)


@scenario("bounds-central-never-confirms", tags=("bletransfer", "bounds", "virtual"))
def bounds_central_never_confirms(ctx: Context):
    """A central that writes a HELLO, subscribes to Apple's characteristic (served with
    indications on this stock host) and never confirms an indication (the radio drops b's
    confirmations): the indication carrying the handshake's first message stays unconfirmed,
    and the sender drops the central within the handshake's bound, saying so; the next central
    is served."""
    ctx.require_bletransfer()
    ctx.lab.sh("a", "lab_radio_ctl drop-confirmations b on", step="b's confirmations dropped")
    try:
        hostile = ctx.central(None, extra=f"--write-hello {HELLO} --message-timeout 120 --scan-timeout 60")
        res = ctx.lab.run(
            a='"$BLETRANSFER_BIN" send --json --timeout 300 "after the unconfirming central"',
            b=f'{hostile}; "$BLETRANSFER_BIN" receive --timeout 200',
            b_after=("a", r'"event":"advertising"'), deadline=330, step="unconfirming central, then receive",
            expect={"a": 0, "b": 0},
            timeline=((("a", r'"event":"central-dropped"', 0.0),
                       lambda lab: lab.sh("a", "lab_radio_ctl drop-confirmations b off", step="confirmations back")),))
    finally:
        ctx.lab.sh("a", "lab_radio_ctl drop-confirmations b off", step="b's confirmations carried", check=False)
    a_out = res.job("a").stdout()
    dropped = json_events(a_out, "central-dropped")
    ctx.check(len(dropped) == 1, f"the sender dropped the central once, saw {len(dropped)}")
    reason = dropped[0]["reason"] if dropped else ""
    ctx.check("did not confirm the indication" in reason, f"the line names the unconfirmed indication: {reason!r}")
    subscribed = next(iter(json_events(a_out, "subscribed")), None)
    after = epoch_seconds(dropped[0]["time"]) - epoch_seconds(subscribed["time"]) if dropped and subscribed else 1e9
    ctx.figure("hostile_unconfirming_dropped_after_s", round(after, 1))
    ctx.check(after <= HANDSHAKE_BOUND + 6, f"dropped {after:.1f} s after subscribing (bound {HANDSHAKE_BOUND} s)")
    ctx.check(res.job("b").stdout().strip().endswith("after the unconfirming central"), "the next central received the message")
