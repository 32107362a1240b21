#!/usr/bin/env python3
"""Lab scenarios: Apple's flow between a bletransfer host and a third-party peer on hosts with
BlueZ's stock configuration (no `[GATT] Channels` line: three ATT bearers, Enhanced ATT on).

BlueZ 5.66 spreads one characteristic's notifications over the bearers and they can overtake
each other (scripts/lab/README.md, "Ordering on stock BlueZ"); Apple's format has no sequence
numbers. What must hold: nothing is ever reported as delivered or received intact without
saying that its order was at risk. Each scenario repeats the transfer and prints how many
payloads arrived identical (figures `*_identical`).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Context, scenario, sha256  # noqa: E402
from lab_events import json_events  # noqa: E402

# Four repetitions in the suite (CI time); LAB_STOCK_REPEAT=20 for a closer look.
REPEAT = int(os.environ.get("LAB_STOCK_REPEAT", "4"))


def text_payload(size: int) -> bytes:
    line = "Ordering on stock BlueZ — naïve café ✓ 🚀 line %05d\n"
    data = "".join(line % i for i in range(size // 20)).encode()
    return data[:size]


def send_to_bleak(ctx: Context, data: bytes, count: int, delivery: str, label: str, extra: str = ""):
    """`send --compat-delivery DELIVERY` → the bleak central, `count` times; returns (delivered
    events, how many arrived identical, the sender's output)."""
    msg = ctx.payload(f"message-{label}", data)
    out = ctx.path(f"received-{label}")
    res = ctx.lab.run(a=f'"$BLETRANSFER_BIN" send --json --compat-delivery {delivery} --file {shlex.quote(msg)} '
                        f'--count {count} --timeout 300 {extra}',
                      b=ctx.central(out, count=count, extra="--retry-for 120 --scan-timeout 60"),
                      b_after=("a", r'"event":"advertising"'), deadline=340,
                      step=f"send --compat-delivery {delivery} → bleak ×{count}", expect={"a": 0, "b": 0})
    delivered = json_events(res.job("a").stdout(), "delivered")
    ctx.check(len(delivered) == count, f"{label}: {count} deliveries counted, got {len(delivered)}")
    identical = [ctx.read(f"{out}.{i}") == data for i in range(1, count + 1)]
    unmarked_bad = [i for i, d in enumerate(delivered, 1)
                    if not d["message"].get("orderAtRisk") and not identical[i - 1]]
    ctx.check(not unmarked_bad, f"{label}: deliveries reported without an order warning but not identical: {unmarked_bad}")
    return delivered, sum(identical), res.job("a").stdout() + res.job("a").stderr()


def mean_seconds(delivered: list[dict]) -> float:
    seconds = [d["message"]["seconds"] for d in delivered if "seconds" in d["message"]]
    return sum(seconds) / len(seconds) if seconds else float("nan")


@scenario("stock-send-to-bleak", tags=("bletransfer", "stock", "peers"), conf="default")
def stock_send_to_bleak(ctx: Context):
    """Stock config: bletransfer send (default --compat-delivery auto: confirmed indications on
    an Enhanced ATT host) → bleak central (Apple's flow), 16 KiB text in MTU-sized values,
    REPEAT times: every one identical and none marked at risk. Then 3 with notifications (as
    Apple's sample) for the cost: each one identical or marked at risk."""
    ctx.require_bletransfer()
    data = text_payload(16 * 1024)
    delivered, identical, _ = send_to_bleak(ctx, data, REPEAT, "auto", "indicate")
    at_risk = sum(bool(d["message"].get("orderAtRisk")) for d in delivered)
    ctx.figure("stock_send_to_bleak_identical", f"{identical}/{REPEAT}")
    ctx.figure("stock_send_to_bleak_marked_at_risk", f"{at_risk}/{REPEAT}")
    ctx.check(identical == REPEAT, f"every payload identical at the bleak central, got {identical}/{REPEAT}")
    ctx.check(at_risk == 0, f"confirmed indications are never marked at risk, got {at_risk}/{REPEAT}")
    indicate_seconds = mean_seconds(delivered)

    notify_count = 3
    # bluetoothd on b now knows a from the first run (its cached GATT services stand in for
    # the advertisement); the baseline forgets it, as on a host meeting the sender first.
    ctx.lab.ensure_ready("default")
    delivered, identical, output = send_to_bleak(ctx, data, notify_count, "notify", "notify")
    notify_seconds = mean_seconds(delivered)
    ctx.figure("stock_send_to_bleak_notify_identical", f"{identical}/{notify_count}")
    ctx.figure("stock_send_to_bleak_indicate_seconds", round(indicate_seconds, 2))
    ctx.figure("stock_send_to_bleak_notify_seconds", round(notify_seconds, 2))
    ctx.figure("stock_send_to_bleak_indicate_cost", round(indicate_seconds / notify_seconds, 2))
    if identical < notify_count:
        ctx.check("out of order" in output, "with notifications the sender warned that the order is at risk")


@scenario("stock-send-to-bleak-20", tags=("bletransfer", "stock", "peers", "long"), conf="default")
def stock_send_to_bleak_20(ctx: Context):
    """Stock config: bletransfer send --value-size 20 (Apple's sample's value size; confirmed
    indications) → bleak central, 16 KiB text REPEAT times: every one identical, none at risk."""
    ctx.require_bletransfer()
    data = text_payload(16 * 1024)
    delivered, identical, _ = send_to_bleak(ctx, data, REPEAT, "auto", "indicate-20", extra="--value-size 20")
    at_risk = sum(bool(d["message"].get("orderAtRisk")) for d in delivered)
    ctx.figure("stock_send_to_bleak_20_identical", f"{identical}/{REPEAT}")
    ctx.figure("stock_send_to_bleak_20_seconds", round(mean_seconds(delivered), 2))
    ctx.check(identical == REPEAT, f"every payload identical at the bleak central, got {identical}/{REPEAT}")
    ctx.check(at_risk == 0, f"confirmed indications are never marked at risk, got {at_risk}/{REPEAT}")


def bless_to_receive(ctx: Context, chunk: int, tag: str):
    ctx.require_bletransfer()
    data = text_payload(16 * 1024)
    msg = ctx.payload("message", data)
    inbox = ctx.path("inbox")
    res = ctx.lab.run(a=ctx.peripheral(msg, chunk=chunk, count=REPEAT),
                      b=f'"$BLETRANSFER_BIN" receive --json --output-dir {shlex.quote(inbox)} '
                        f'--count {REPEAT} --timeout 300',
                      b_after=("a", r"^READY"), deadline=340, step=f"bless ({chunk}-byte values) → receive ×{REPEAT}",
                      expect={"a": 0, "b": 0})
    received = json_events(res.job("b").stdout(), "received")
    ctx.check(len(received) == REPEAT, f"{REPEAT} messages received, got {len(received)}")
    identical = 0
    silent_bad = []
    for i, event in enumerate(received, 1):
        got = ctx.read(event.get("path", ""))
        same = got == data
        identical += same
        if not same and not event["message"].get("orderAtRisk"):
            silent_bad.append((i, len(got), sha256(got)[:12]))
    ctx.figure(f"stock_bless_{tag}_identical", f"{identical}/{REPEAT}")
    ctx.figure(f"stock_bless_{tag}_marked_at_risk",
               f"{sum(bool(e['message'].get('orderAtRisk')) for e in received)}/{REPEAT}")
    ctx.check(not silent_bad, f"messages received without an order warning but not identical: {silent_bad}")


@scenario("stock-bless-to-receive-20", tags=("bletransfer", "stock", "peers"), conf="default")
def stock_bless_to_receive_20(ctx: Context):
    """Stock config: bless peripheral (Apple's flow, 20-byte values) → bletransfer receive,
    16 KiB text REPEAT times; each message identical or warned about."""
    bless_to_receive(ctx, 20, "20")


@scenario("stock-bless-to-receive-mtu", tags=("bletransfer", "stock", "peers", "long"), conf="default")
def stock_bless_to_receive_mtu(ctx: Context):
    """Stock config: bless peripheral (Apple's flow, 500-byte values) → bletransfer receive,
    16 KiB text REPEAT times; each message identical or warned about."""
    bless_to_receive(ctx, 500, "mtu")


# Which host's channel fails, and when (after the central connected): LAB_EATT_RESET=b:1.5.
RESET_SIDE, RESET_DELAY = os.environ.get("LAB_EATT_RESET", "a:0.3").split(":")[0], \
    float(os.environ.get("LAB_EATT_RESET", "a:0.3").split(":")[1])


@scenario("stock-eatt-reset", tags=("bletransfer", "stock", "peers", "faults", "virtual", "extended"), conf="default")
def stock_eatt_reset(ctx: Context):
    """Stock config: bletransfer send → bleak central, 16 KiB text in 512-byte confirmed
    indications, with one of the link's Enhanced ATT channels failing for the sender's host
    alone just as the central subscribes (the radio's `reset-eatt a`: the central goes on
    using it, and what it sends there is dropped). Whatever arrives is either the whole message
    or reported: nothing is counted delivered, or stored by the central, short of a value."""
    ctx.require_bletransfer()
    data = text_payload(16 * 1024)
    msg = ctx.payload("message", data)
    out = ctx.path("received")
    res = ctx.lab.run(a=f'"$BLETRANSFER_BIN" send --json --file {shlex.quote(msg)} --timeout 200',
                      b=ctx.central(out, extra="--retry-for 150 --scan-timeout 60"),
                      b_after=("a", r'"event":"advertising"'), deadline=240, step="send → bleak, an EATT channel fails",
                      expect={"a": None, "b": None},
                      timeline=((("b", r"^CONNECTED", RESET_DELAY),
                                 lambda lab: lab.sh("a", f"lab_radio_ctl reset-eatt {RESET_SIDE}",
                                                    step="reset an EATT channel", check=False)),))
    delivered = json_events(res.job("a").stdout(), "delivered")
    got = ctx.read(out)
    ctx.figure("stock_eatt_reset_bytes_stored", f"{len(got)}/{len(data)}")
    ctx.figure("stock_eatt_reset_delivered", len(delivered))
    ctx.figure("stock_eatt_reset_exits", f"a={res.job('a').rc} b={res.job('b').rc}")
    if delivered and not delivered[0]["message"].get("orderAtRisk"):
        ctx.check(got == data, f"delivered without a warning, so the central has it whole: {len(got)} of {len(data)} bytes")
    ctx.check(not got or got == data or any(d["message"].get("orderAtRisk") for d in delivered),
              f"the central stored {len(got)} of {len(data)} bytes and nothing said so")
