#!/usr/bin/env python3
"""Lab scenarios for `bletransfer send` and `bletransfer receive` (BLETRANSFER_BIN).

Loaded by scenarios.py with every other scenarios_*.py module, so `lab.sh suite` runs them;
`python3 scenarios.py --tag roles` runs only these. Host a sends, host b receives unless a
scenario says otherwise. Scenarios between two bletransfer hosts start from the distribution's
bluetoothd configuration (EATT on, notifications may be reordered: the framed format copes);
scenarios with Apple-flow peers start from `[GATT] Channels=1`, as Apple's flow has no
sequence numbers.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "guest"))
from scenarios import Context, l2cap_capacity, scenario, sha256  # noqa: E402
from lab_events import (event_lines, first_at, last_event_number, median, rescan_gaps,  # noqa: E402
                        stamped, states, visit_timeline)

SEND = '"$BLETRANSFER_BIN" send --json'
RECEIVE = '"$BLETRANSFER_BIN" receive --json'
ADVERTISING = ("a", r'"event":"advertising"')


def transfer(ctx: Context, data: bytes, deadline: float = 300, name: str = "message", options: str = "") -> tuple:
    """Our send on a (from a file), our receive on b (into a file); checks the bytes. b's job
    ends with a line `RECEIVE-EXIT <seconds since 1970>`: when the receive process ended, read
    from bash's own clock ($EPOCHREALTIME) as the shell regains control. A `$(date …)` there
    would fork a process whose own start, 0.15–0.2 s in a TCG guest, counted as ours.
    `options` go to both commands."""
    msg = ctx.payload(name, data)
    out = ctx.path(f"{name}-received")
    allow = " --allow-empty" if not data else ""
    timed_receive = (f'{RECEIVE}{options} --output {shlex.quote(out)} --timeout {int(deadline)}; '
                     'rc=$?; echo "RECEIVE-EXIT $EPOCHREALTIME"; exit $rc')
    res = ctx.lab.run(a=f"{SEND}{options} --file {shlex.quote(msg)}{allow} --timeout {int(deadline)}",
                      b=timed_receive,
                      b_after=ADVERTISING, deadline=deadline + 30, step=f"send → receive {len(data)} bytes",
                      expect={"a": 0, "b": 0})
    got = ctx.read(out)
    ctx.check(got == data, f"{len(got)} bytes (sha256 {sha256(got)[:16]}) received, "
                           f"{len(data)} bytes (sha256 {sha256(data)[:16]}) sent")
    ctx.check(len(event_lines(res.job("a").stdout(), "delivered")) == 1, "the sender counted one delivery")
    return res, out


@scenario("roles-text", tags=("bletransfer", "roles"))
def roles_text(ctx: Context):
    """bletransfer send "text" on a → bletransfer receive on b, message on standard output."""
    ctx.require_bletransfer()
    text = "Grüße aus dem Labor — BLE ✓ 🚀 " * 4  # multi-byte characters straddle value boundaries
    res = ctx.lab.run(a=f'"$BLETRANSFER_BIN" send --json {shlex.quote(text)} --timeout 240',
                      b='"$BLETRANSFER_BIN" receive --timeout 240',
                      b_after=ADVERTISING, deadline=270, step="send text → receive to stdout",
                      expect={"a": 0, "b": 0})
    got = res.job("b").stdout().encode()
    ctx.check(got == text.encode(), f"standard output of receive is the message ({len(got)} bytes)")
    framed = [e for e in event_lines(res.job("a").stdout(), "subscribed") if '"format":"secure"' in e]
    ctx.check(bool(framed), "two bletransfer hosts without keys speak the framed protocol, encrypted")


@scenario("roles-binary", tags=("bletransfer", "roles"))
def roles_binary(ctx: Context):
    """64 KiB of every byte value, send --file → receive --output, bit-identical."""
    ctx.require_bletransfer()
    data = bytes(range(256)) * 64 + os.urandom(48 * 1024)
    res, _ = transfer(ctx, data, deadline=400)
    ctx.figure("roles_64kib_seconds", round(res.seconds, 1))


@scenario("roles-empty", tags=("bletransfer", "roles", "extended"))
def roles_empty(ctx: Context):
    """An empty message (send --allow-empty) arrives as an empty file."""
    ctx.require_bletransfer()
    _, out = transfer(ctx, b"", deadline=200, name="empty")
    job = ctx.lab.sh("b", f"test -f {shlex.quote(out)} && stat -c %s {shlex.quote(out)}", step="empty file exists",
                     check=False)
    ctx.check(job.rc == 0 and job.stdout().strip() == "0", f"an empty file was written ({job.output().strip()!r})")


@scenario("roles-1mib", tags=("bletransfer", "roles", "throughput"))
def roles_1mib(ctx: Context):
    """1 MiB random payload, bletransfer → bletransfer over the L2CAP channel on the untuned link
    (`--no-tune`: the link the lab's profile gives stock hosts), between two L2CAP floods a → b in
    the channel's 8 KiB SDUs: the transfer over the mean of the floods, and both over the model's
    ceiling of that link. Then 256 KiB over GATT notifications (--no-l2cap) against the same
    floods. On the `instant` profile the guests' CPUs set the pace and drift minute to minute:
    there the transfer runs three times between four floods and the median ratio counts."""
    ctx.require_bletransfer()
    import radio_model as rm  # noqa: E402
    profile = ctx.link_profile
    ctx.figure("roles_1mib_link", profile.name)
    data = os.urandom(1024 * 1024)
    floods, rates, ratios, exits, hand_backs = [], [], [], [], []
    ceiling = rm.profile_channel_ceiling(profile) / 1024 if profile.timed else None

    def flood() -> float:
        # The same direction, SDU size as bletransfer's channel (8 KiB values); about 12 s of
        # data at the link's ceiling (64 SDUs on the instant link).
        frames = max(4, int(ceiling * 1024 * 12 / 8192)) if ceiling else 64
        return l2cap_capacity(ctx, frames=frames, sdu=8192, sender="a")

    floods.append(flood())
    for attempt in ((1,) if profile.timed else (1, 2, 3)):
        res, _ = transfer(ctx, data, deadline=900, name=f"1mib-{attempt}", options=" --no-tune")
        if attempt == 1:
            ctx.figure("roles_1mib_wall_seconds", round(res.seconds, 1))
            # receive returned before bluetoothd finished the clean-up it asked for: within
            # seconds there is still no device record and no link left on b.
            left = ctx.lab.sh("b", 'for i in $(seq 1 12); do '
                                   'd=$(timeout 5 bluetoothctl devices 2>/dev/null | grep -c "^Device"); '
                                   'c=$(hcitool con 2>/dev/null | grep -c "LE "); '
                                   '[ "$d" = 0 ] && [ "$c" = 0 ] && { echo "CLEAN after ${i}s"; exit 0; }; sleep 1; done; '
                                   'echo "LEFT devices=$d links=$c"', step="nothing left after receive", check=False)
            ctx.check("CLEAN" in left.stdout(), f"no device record or link left on b after receive: {left.stdout().strip()}")
        floods.append(flood())
        b_out = res.job("b").stdout()
        ctx.check(any('"transport":"l2cap"' in e for e in event_lines(b_out, "subscribed")),
                  "two bletransfer hosts ran the transfer over the L2CAP channel")
        seconds = last_event_number(b_out, "received", "seconds")
        if seconds:
            rates.append(round(1024 / seconds, 1))
            ratios.append(round(rates[-1] / max((floods[-2] + floods[-1]) / 2, 1e-6), 2))
        exit_split = stored_to_exit(b_out)
        if exit_split is not None:
            exits.append(exit_split[0])
            if exit_split[1] is not None:
                hand_backs.append(exit_split[1])
    # The flood makes a link of its own; the next scenario must not find it (the kernel drops
    # an idle L2CAP link within seconds).
    ctx.lab.sh("b", 'for i in $(seq 1 20); do [ "$(hcitool con 2>/dev/null | grep -c "LE ")" = 0 ] && exit 0; '
                    'sleep 1; done', step="the flood's link is gone", check=False)
    # A quarter of the payload over GATT notifications (--no-l2cap), for comparison.
    gatt_bytes = 256 * 1024
    gatt, _ = transfer(ctx, data[:gatt_bytes], deadline=900, name="1mib-gatt", options=" --no-l2cap --no-tune")
    gatt_seconds = last_event_number(gatt.job("b").stdout(), "received", "seconds")
    flood_rate = median(floods)
    ctx.figure("roles_1mib_ceiling_floods_kib_s", "/".join(str(f) for f in floods))
    ctx.figure("roles_1mib_ceiling_l2cap_kib_s", flood_rate)
    if ceiling:
        ctx.figure("roles_1mib_model_ceiling_kib_s", round(ceiling, 1))
        ctx.figure("roles_1mib_flood_model_ratio", round(flood_rate / ceiling, 2))
    if rates:
        ctx.figure("roles_1mib_runs_kib_s", "/".join(str(r) for r in rates))
        ctx.figure("roles_1mib_kib_s", median(rates))
        ctx.figure("roles_1mib_seconds", round(1024 / median(rates), 1))
        ctx.figure("roles_1mib_ceiling_ratios", "/".join(str(r) for r in ratios))
        ctx.figure("roles_1mib_ceiling_ratio", median(ratios))
        if ceiling:
            ctx.figure("roles_1mib_model_ratio", round(median(rates) / ceiling, 2))
        if len(ratios) > 1:
            ctx.figure("roles_1mib_ceiling_ratio_spread", round(max(ratios) - min(ratios), 2))
        if profile.timed:
            ctx.check(median(ratios) >= 0.9, f"1 MiB over the channel reached {median(ratios)} of the flood (at least 0.9)")
    if exits:
        ctx.figure("roles_1mib_stored_to_exit_s", max(exits))
        ctx.figure("roles_1mib_stored_to_exit_runs_s", "/".join(str(e) for e in exits))
    if hand_backs:
        ctx.figure("roles_1mib_stored_to_last_event_s", "/".join(str(role) for role, _ in hand_backs))
        ctx.figure("roles_1mib_last_event_to_exit_s", "/".join(str(end) for _, end in hand_backs))
    if gatt_seconds:
        gatt_rate = round(gatt_bytes / 1024 / gatt_seconds, 1)
        ctx.figure("roles_1mib_gatt_kib_s", gatt_rate)
        ctx.figure("roles_1mib_gatt_ceiling_ratio", round(gatt_rate / max(flood_rate, 1e-6), 2))
        if profile.timed:
            ctx.check(gatt_rate >= 0.7 * flood_rate, f"GATT reached {gatt_rate} KiB/s, at least 0.7 of the flood's {flood_rate}")


def stored_to_exit(b_out: str) -> tuple | None:
    """From the stored message to the receive process's exit (at most 0.5 s), and that split at
    the role's last event (`disconnected`: ACK written, channel closed, removal asked for) into
    the role's own part and the process's end, which the guest's single emulated CPU shares with
    bluetoothd taking the link down. None without the stamps."""
    stored_at = last_event_number(b_out, "received", "unixTime")
    handed_back = last_event_number(b_out, "disconnected", "unixTime")
    exited = re.search(r"RECEIVE-EXIT ([0-9.]+)", b_out)
    if stored_at is None or not exited:
        return None
    exited_at = float(exited.group(1))
    split = None
    if handed_back is not None:
        split = (round(handed_back - stored_at, 2), round(exited_at - handed_back, 2))
    return round(exited_at - stored_at, 2), split


@scenario("roles-rescan", tags=("bletransfer", "roles"))
def roles_rescan(ctx: Context):
    """send --count 3 → receive --count 3 --output-dir: three files in one visit (framed version
    2 carries several messages per connection); then the same with `receive --compat` (Apple's
    flow, one message a visit): three files, rescanning after each."""
    ctx.require_bletransfer()
    data = "three times, each from byte 0 ✓".encode()
    msg = ctx.payload("message", data)
    for compat in (False, True):
        label = "compat" if compat else "framed"
        out_dir = ctx.path(f"inbox-{label}")
        flag = " --compat" if compat else ""
        res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --count 3 --timeout 400",
                          b=stamped(f"( {RECEIVE}{flag} --output-dir {shlex.quote(out_dir)} --count 3 --timeout 400; "
                                    "echo EXIT=$? )"),
                          b_after=ADVERTISING, deadline=430, step=f"three messages ({label})", expect={"a": 0})
        b_out = res.job("b").stdout()
        ctx.check(re.search(r"^[0-9.]+ EXIT=0$", b_out, re.M) is not None, f"{label}: receive exited 0")
        listing = ctx.lab.sh("b", f"ls -A {shlex.quote(out_dir)}", step="inbox listing").stdout().split()
        ctx.check(len(listing) == 3, f"{label}: three files in the output directory, found {listing}")
        for name in listing:
            got = ctx.read(f"{out_dir}/{name}")
            ctx.check(got == data, f"{label}: {name} is the message ({len(got)} bytes)")
        visits = len(event_lines(b_out, "connected"))
        ctx.figure(f"roles_rescan_{label}_visits", visits)
        if not compat:
            ctx.check(visits == 1, f"framed: the three messages took one visit, took {visits}")
    ctx.check(len(event_lines(b_out, "scanning")) >= 3, "compat: the central scanned again after each message")
    # Issue #13: the next visit starts within a second or two of the last disconnect (a
    # restarted scan, or a look at what BlueZ already knows), not after 35-45 s of luck.
    gaps = rescan_gaps(b_out)
    ctx.check(len(gaps) >= 2, f"two rescans measured: {gaps}")
    if gaps:
        ctx.figure("roles_rescan_gap_max_s", max(gaps))
        ctx.figure("roles_rescan_gap_median_s", sorted(gaps)[len(gaps) // 2])


@scenario("roles-send-to-bleak", tags=("bletransfer", "roles", "peers"), conf="channels1")
def roles_send_to_bleak(ctx: Context):
    """bletransfer send on a → a bleak central on b following Apple's central flow (compat)."""
    ctx.require_bletransfer()
    data = ("UTF-8 for Apple's flow: naïve café ✓ — " * 8).encode() + bytes(range(256))
    msg = ctx.payload("message", data)
    out = ctx.path("received")
    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 300",
                      b=ctx.central(out, extra="--retry-for 120 --scan-timeout 60"),
                      b_after=ADVERTISING, deadline=330, step="send → bleak central", expect={"a": 0, "b": 0})
    got = ctx.read(out)
    ctx.check(got == data, f"bleak central got {len(got)} of {len(data)} bytes, identical: {got == data}")
    compat = [e for e in event_lines(res.job("a").stdout(), "subscribed") if '"format":"compat"' in e]
    ctx.check(bool(compat), "a central that wrote no HELLO gets the compat format")


@scenario("roles-receive-from-bless", tags=("bletransfer", "roles", "peers"), conf="channels1")
def roles_receive_from_bless(ctx: Context):
    """A bless peripheral on a (Apple's peripheral flow: 20-byte chunks, EOM, no back-pressure,
    three messages in a row) → bletransfer receive on b: every message identical."""
    ctx.require_bletransfer()
    data = ("from Apple's peripheral flow, in 20-byte chunks — ✓ " * 6).encode()
    msg = ctx.payload("message", data)
    out_dir = ctx.path("inbox")
    res = ctx.lab.run(a=ctx.peripheral(msg, chunk=20, count=3),
                      b=f"{RECEIVE} --output-dir {shlex.quote(out_dir)} --count 3 --timeout 400",
                      b_after=("a", r"^READY"), deadline=430, step="bless → receive", finish_with="b",
                      expect={"b": 0})
    listing = ctx.lab.sh("b", f"ls -A {shlex.quote(out_dir)}", step="inbox listing").stdout().split()
    ctx.check(len(listing) == 3, f"three messages received, found {listing}")
    for name in listing:
        ctx.check(ctx.read(f"{out_dir}/{name}") == data, f"{name} is the message")
    first_byte = [e for e in event_lines(res.job("b").stdout(), "progress")]
    ctx.check(bool(first_byte), "progress events were reported")


@scenario("roles-state-unsupported", tags=("bletransfer", "roles", "states", "virtual"))
def roles_state_unsupported(ctx: Context):
    """No controller on b: receive fails fast with exit 69 and says why; the controller returns:
    receive works again (state unsupported reached and left)."""
    ctx.require_bletransfer()
    ctx.lab.fault("b", "detach-controller")
    job = ctx.lab.sh("b", '"$BLETRANSFER_BIN" receive --json --timeout 30', step="receive without a controller",
                     check=False)
    ctx.check(job.rc == 69, f"exit status 69 without a controller, got {job.rc}: {job.output()[-300:]}")
    ctx.check("unsupported" in job.output(), "the state unsupported is reported")
    ctx.lab.fault("b", "attach-controller")
    ctx.lab.sh("b", "lab_wait 30 eval 'bluetoothctl show | grep -q \"Powered: yes\"'", step="controller back")
    transfer(ctx, b"after the controller came back", deadline=240)


@scenario("roles-state-powered-off", tags=("bletransfer", "roles", "states"))
def roles_state_powered_off(ctx: Context):
    """a's adapter is off when send starts: state poweredOff, then powered on → poweredOn and
    the message is delivered without restarting the process."""
    ctx.require_bletransfer()
    ctx.lab.fault("a", "power-off")
    data = b"sent once the adapter came back"
    msg = ctx.payload("message", data)
    out = ctx.path("received")
    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 300",
                      b=f"{RECEIVE} --output {shlex.quote(out)} --timeout 300",
                      b_after=ADVERTISING, deadline=330, step="send across a power-on",
                      timeline=((("a", r'"state":"poweredOff"', 3.0), ("a", "power-on")),),
                      expect={"a": 0, "b": 0})
    seen = states(res.job("a").stdout())
    ctx.check("poweredOff" in seen and seen.index("poweredOff") < len(seen) - 1 and seen[-1] == "poweredOn",
              f"poweredOff then poweredOn reported, saw {seen}")
    ctx.check(ctx.read(out) == data, "message delivered after power-on")


@scenario("roles-state-resetting", tags=("bletransfer", "roles", "states", "extended"))
def roles_state_resetting(ctx: Context):
    """bluetoothd restarts under a waiting sender: state resetting, then poweredOn again, the
    application and advertisement registered anew, and the message delivered."""
    ctx.require_bletransfer()
    data = b"survived a bluetoothd restart"
    msg = ctx.payload("message", data)
    out = ctx.path("received")
    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 300",
                      b=f"{RECEIVE} --output {shlex.quote(out)} --timeout 300",
                      b_after=("a", r'"state":"resetting"'), deadline=330, step="send across a bluetoothd restart",
                      timeline=((("a", r'"event":"advertising"', 2.0), ("a", "restart-bluetoothd")),),
                      expect={"a": 0, "b": 0})
    seen = states(res.job("a").stdout())
    ctx.check("resetting" in seen and seen[-1] == "poweredOn", f"resetting then poweredOn reported, saw {seen}")
    ctx.check(len(event_lines(res.job("a").stdout(), "advertising")) >= 2, "advertising registered again")
    ctx.check(ctx.read(out) == data, "message delivered after the restart")


@scenario("roles-state-unauthorized", tags=("bletransfer", "roles", "states", "virtual"))
def roles_state_unauthorized(ctx: Context):
    """A user the D-Bus policy denies org.bluez: state unauthorized, exit 77, a message naming
    what to change."""
    ctx.require_bletransfer()
    for cmd in ("send hello --timeout 30", "receive --timeout 30"):
        job = ctx.lab.sh("b", f'lab_as_denied_user "$BLETRANSFER_BIN" {cmd} --json', step=f"denied {cmd.split()[0]}",
                         check=False)
        out = job.output()
        ctx.check(job.rc == 77, f"{cmd.split()[0]}: exit status 77, got {job.rc}: {out[-300:]}")
        ctx.check("unauthorized" in out, f"{cmd.split()[0]}: state unauthorized reported")
        ctx.check(re.search(r"bluetooth|policy|group", out, re.I) is not None,
                  f"{cmd.split()[0]}: the message says which group or policy to change")


@scenario("roles-link-cut", tags=("bletransfer", "roles", "faults", "virtual"))
def roles_link_cut(ctx: Context):
    """The radio link is cut mid-transfer: nothing partial is written; after the link returns
    the central rescans and the whole message arrives exactly once."""
    ctx.require_bletransfer()
    data = os.urandom(512 * 1024)  # ~10 s here: the cut, a second after the first byte, is mid-transfer
    msg = ctx.payload("message", data)
    out_dir = ctx.path("inbox")
    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 500",
                      b=f"{RECEIVE} --output-dir {shlex.quote(out_dir)} --idle-timeout 10 --timeout 500",
                      b_after=ADVERTISING, deadline=530, step="send across a link cut",
                      timeline=((("b", r'"event":"progress"', 1.0), ("link", "cut")),
                                (("b", r'"event":"progress"', 16.0), ("link", "restore"))),
                      expect={"a": 0, "b": 0})
    listing = ctx.lab.sh("b", f"ls -A {shlex.quote(out_dir)}", step="inbox listing").stdout().split()
    ctx.check(len(listing) == 1, f"exactly one file, no partial one, found {listing}")
    ctx.check(ctx.read(f"{out_dir}/{listing[0]}") == data if listing else False, "the file is the whole message")
    b_out = res.job("b").stdout()
    ctx.check(bool(event_lines(b_out, "aborted") or event_lines(b_out, "retrying") or event_lines(b_out, "disconnected")),
              "the receiver noticed the cut")


@scenario("roles-latency", tags=("bletransfer", "roles", "throughput", "extended"), conf="channels1")
def roles_latency(ctx: Context):
    """Process start → first byte and → message complete for bletransfer receive (over the L2CAP
    channel, then over GATT with --no-l2cap), next to the bleak central, each fed 16 KiB by
    bletransfer send (Channels=1: Apple's flow has no order)."""
    ctx.require_bletransfer()
    data = os.urandom(16 * 1024)
    msg = ctx.payload("message", data)
    for central, command, first_byte, complete in (
            ("bletransfer", f"{RECEIVE} --output {{out}} --timeout 240", r'"event":"progress"', r'"event":"received"'),
            # The same over GATT: what reading the PSM and opening the channel cost before the first byte.
            ("bletransfer_gatt", f"{RECEIVE} --no-l2cap --output {{out}} --timeout 240", r'"event":"progress"',
             r'"event":"received"'),
            ("bleak", ctx.central("{out}", extra="--retry-for 120 --scan-timeout 60"), r"^FIRST-VALUE", r"^RECEIVED")):
        out = ctx.path(f"received-{central}")
        res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 240",
                          b=stamped(command.replace("{out}", shlex.quote(out))),
                          b_after=ADVERTISING, deadline=270, step=f"send → {central} central", expect={"a": 0})
        ctx.check(ctx.read(out) == data, f"{central} central: message intact")
        text = res.job("b").stdout()
        ctx.figure(f"{central}_first_byte_s", first_at(text, first_byte))
        ctx.figure(f"{central}_complete_s", first_at(text, complete))


# The steps of a receiver's visit that first-visit times, in the order they come.
VISIT_STEPS = ("state", "scanning", "found", "connected", "subscribed")


@scenario("first-visit", tags=("bletransfer", "roles", "throughput"), conf="default")
def first_visit(ctx: Context):
    """A newcomer's first wait: `send` already advertising on a, `receive` started on b; seconds
    from receive's launch to its subscription, median and each step's median: three runs on a
    timed profile (the radio sets the pace), five on the instant one (the CPUs do, and drift)."""
    ctx.require_bletransfer()
    timed = ctx.link_profile.timed
    data = b"first visit\n"
    msg = ctx.payload("first-visit", data)
    runs = []
    for attempt in range(1, 4 if timed else 6):
        out = ctx.path(f"first-visit-{attempt}")
        res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(msg)} --timeout 120",
                          b=f"echo T0 $(date +%s.%N); exec {RECEIVE} --output {shlex.quote(out)} --timeout 90",
                          b_after=ADVERTISING + (1.0,), deadline=150, step=f"first visit {attempt}")
        ctx.check(ctx.read(out) == data, f"run {attempt}: message intact")
        marks = visit_timeline(res.job("b").stdout(), VISIT_STEPS)
        ctx.check("subscribed" in marks, f"run {attempt}: the subscription is seen with its time")
        ctx.figure(f"first_visit_run{attempt}", marks)
        runs.append(marks)
    for step in VISIT_STEPS:
        ctx.figure(f"first_visit_{step}_median_s", median([m[step] for m in runs if step in m]))
