#!/usr/bin/env python3
"""Lab scenarios for the secure mode (issue #16: only authorized peers exchange messages,
authenticated and encrypted; docs/wire-v2.md).

    BLETRANSFER_BIN=/path/to/bletransfer python3 scripts/lab/scenarios_secure.py [NAME...] [--reuse]

Same runner and options as scenarios.py. The daemon scenarios are tagged `virtual`: they read
outboxes and inboxes through the run folder the guests share with this machine, which hw.py's
real hosts do not. Each scenario makes fresh keys on the guests
(`bletransfer keygen` into the guest's own /tmp, so private keys never reach the run folder)
and writes the authorized-peers files it needs.

  secure-daemons              daemons holding each other's keys: files a → b through a power cycle
                              of a's adapter; each once, identical, its xattr naming a's key
  secure-vs-apple-central     a bleak central (Apple's flow) subscribes to a secure sender daemon:
                              no payload byte, outbox unchanged, a log line names the central
  secure-vs-apple-peripheral  a bless peripheral (Apple's flow) against a secure receiver daemon:
                              nothing stored, a line names the peripheral, the daemon runs on
  secure-unauthorized-key     bletransfer with a key the other side does not list, as sender and
                              as receiver: nothing stored or sent, the refusal names its key
  secure-no-plaintext         btmon captures of 16 KiB in Apple's flow, between keyless hosts and
                              between keyed hosts: Apple's flow shows the payload, the framed
                              transfers (keys or not) not one 16-byte window
  secure-throughput           1 MiB between keyless hosts and between keyed hosts a → b in the same
                              run: seconds, their ratio, and subscription → first payload byte
  secure-multi                secure daemons a → b: 100 files of 4 KiB three times, each between two
                              runs of one 400 KiB file; each timed from b's first connection to its
                              last file stored; the median of the three 100 × 4 KiB over the mean
                              400 KiB either side (goal ≤ 1.25), the connections used, all 100
                              identical under their names each time
  secure-resume               secure daemons a → b, 4 MiB, the link cut (b's adapter powered off, on
                              5 s later) at about 25, 50 and 75 % of what b verified: bit-identical,
                              visits continue from b's spool; payload bytes a notified over 4 MiB (goal ≤ 1.2)
  secure-resume-ci            the same with 1 MiB cut once (sized for .ci/run)
  secure-resume-restart       1 MiB, b's receiver daemon stopped (SIGTERM) at about 50 % and started
                              again with the same spool: resumed across the restart
  peers-pair                  `bletransfer pair` on both guests, each on a pseudo-terminal: from a pipe
                              it asks nothing (64); b presses Enter (nothing added, 77 both); then
                              each types the other's code after typing a decline ahead of the
                              question (not taken; each file lists the other), then a secure
                              transfer a → b with exactly those files
  peers-outbox-folders        a keyed sender daemon with outbox/lab-b/ and outbox/lab-a-ghost/: b gets
                              the top file and its own; the other stays, b is told nothing of it
  peers-outbox-swap           keyed sender daemon on a: outbox/lab-b/ exchanged (renameat2
                              RENAME_EXCHANGE) with a link to the identity's directory, once, then
                              back and forth for 15 s while b visits: b gets its own file only,
                              nothing of that directory is sent, moved or written
  daemon-drop-latency         keyed idle daemons, default settle time: a 1 KiB file moved into a's
                              outbox, seconds until it is in b's inbox, timed on a (median of 5, the
                              first a cold visit; goal ≤ 2)
  chaos-forty                 (long) keyed daemons, 40 files of 1–160 KiB, 150 s of SIGKILLs of either
                              daemon and adapter power cycles: each file once, identical, none lost
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402
from scenarios import Context, scenario, sha256  # noqa: E402
from lab_events import first_at, json_events, progress_of, stamped, stamped_events, states  # noqa: E402
from lab_fixtures import (KEY_DIR, Key, authorize, count_files, daemon_job, daemon_output, host_keys, keygen,  # noqa: E402
                          mutual_keys, mutual_trust, prepare, regular_files, trust)

SEND = '"$BLETRANSFER_BIN" send --json'
RECEIVE = '"$BLETRANSFER_BIN" receive --json'
ADVERTISING = r'"event":"advertising"'
XATTR = "user.bletransfer.sender"
WINDOW = 16


def address_of(ctx: Context, host: str) -> str:
    address = ctx.lab.sh(host, "lab_address", step=f"address of {host}").stdout().strip().upper()
    ctx.check(re.fullmatch(r"([0-9A-F]{2}:){5}[0-9A-F]{2}", address) is not None, f"address of {host}: {address!r}")
    return address


def lines_naming(text: str, *needles: str) -> list:
    """Lines of `text` that contain every needle (case-insensitive); an address also matches
    in BlueZ's object-path spelling (dev_AA_BB_…)."""
    def has(line: str, needle: str) -> bool:
        low = line.lower()
        return needle.lower() in low or needle.replace(":", "_").lower() in low
    return [line for line in text.splitlines() if all(has(line, n) for n in needles)]


def log_lines(text: str) -> list:
    """The log lines of a command's output (not the --json events)."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("{")]


def payload_windows(payload: bytes) -> set:
    return {payload[i:i + WINDOW] for i in range(len(payload) - WINDOW + 1)}


def windows_found(data: bytes, windows: set) -> int:
    """How many offsets of `data` start a 16-byte window of the payload."""
    return sum(1 for i in range(len(data) - WINDOW + 1) if data[i:i + WINDOW] in windows)


def known_payload(size: int, label: bytes) -> bytes:
    """`size` bytes whose 16-byte windows do not repeat: SHA-256 of a counter."""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(label + i.to_bytes(8, "big")).digest()
        i += 1
    return bytes(out[:size])


def fresh(ctx: Context) -> None:
    """Every scenario here runs bletransfer: skips without its binary. Then empties this
    scenario's folder of payloads, outbox and inbox (a retried scenario starts from nothing,
    not from what its first attempt left)."""
    ctx.require_bletransfer()
    base = ctx.lab.run_dir / "payloads" / ctx.name
    if base.exists():
        shutil.rmtree(base)


def daemon_alive_job(role: str, directory: str, seconds: int, trust_options: str, extra: str = "") -> str:
    """A daemon that runs for `seconds` and is then stopped with SIGTERM: DAEMON-EXIT 0 and
    DAEMON-DONE after ≥ `seconds` show it was still running at the end."""
    return daemon_job(role, directory, f"[ $SECONDS -ge {seconds} ]", seconds + 30, extra, trust=trust_options)


# =============================================================================================
@scenario("secure-daemons", tags=("bletransfer", "daemon", "secure", "faults", "virtual"), conf="default")
def secure_daemons(ctx: Context):
    """Secure daemons holding each other's keys: 6 files a → b through a power cycle of a's adapter."""
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    big = 200 * 1024 + 7
    sizes = [1, 0, big, 20, 5000, 60001]
    payloads = [os.urandom(n) for n in sizes]
    payloads[3] = "Grüße, secure ✓\n".encode()[:20].ljust(20, b".")
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, payloads)
    delivered = [p for p in payloads if p]  # the daemon moves an empty file to failed/ (documented)
    n = len(delivered)
    # The sender stops once its outbox is empty and the power cycle is over: a fast run that
    # delivered everything before the cycle still shows the daemon living through it.
    cycled = "/run/lab/secure-daemons-power-cycled"
    sender = daemon_job("sender", host_outbox, f'[ "$({count_files(host_outbox)})" -eq 0 ] && [ -e {cycled} ]', 300,
                        "--settle-time 0", trust=trust(key_a, peers_a))
    receiver = daemon_job("receiver", host_inbox, f'[ "$({count_files(host_inbox)})" -ge {n} ]', 300,
                          trust=trust(key_b, peers_b))
    ctx.lab.sh("a", f"rm -f {cycled}", step="no power cycle yet")

    def power_on(lab) -> None:
        lab.start("a", f"lab_power on && touch {cycled}", step="power-on", deadline=60)
        scenarios.say("  fault a power-on (marked)")

    # a's adapter goes off a second into the big file (as the receiver reports it), on again 5.5 s later.
    res = ctx.lab.run(a=sender, b=receiver, deadline=360, step="secure daemons",
                      timeline=((("b", progress_of(big), 1.0), ("a", "power-off")),
                                (("b", progress_of(big), 6.5), power_on)))
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, "both daemons exited 0 on SIGTERM")
    seen = states(a_out)
    ctx.check("poweredOff" in seen and seen.count("poweredOn") >= 2,
              f"a's daemon saw its adapter go off and come back: {seen}")
    stored = regular_files(inbox)
    ctx.check(not [p for p in stored if p.name.startswith(".")], f"no partial files: {[p.name for p in stored]}")
    visible = [p for p in stored if not p.name.startswith(".")]
    got = [p.read_bytes() for p in visible]
    ctx.check(len(got) == n, f"{n} files stored, got {len(got)}")
    ctx.check(sorted(sha256(g) for g in got) == sorted(sha256(p) for p in delivered),
              "every non-empty file arrived exactly once, bit-identical")
    # In the secure mode a file keeps its outbox name and modification time.
    sent_names = {f"file{i:03d}.dat": data for i, data in enumerate(payloads, 1) if data}
    ctx.check(sorted(p.name for p in visible) == sorted(sent_names)
              and all(p.read_bytes() == sent_names[p.name] for p in visible),
              f"each file stored under its outbox name: {sorted(p.name for p in visible)}")
    mtimes = [int(p.stat().st_mtime) == 1_700_000_000 + int(p.name[4:7]) for p in visible]
    ctx.figure("secure_daemons_mtimes_kept", f"{sum(mtimes)}/{n}")
    ctx.check(regular_files(outbox) == [], f"outbox empty: {[p.name for p in regular_files(outbox)]}")
    ctx.check(len(regular_files(outbox / "sent")) == n, f"sent/ holds {len(regular_files(outbox / 'sent'))} of {n}")
    failed = [p.name for p in regular_files(outbox / "failed") if not p.name.endswith(".reason")]
    ctx.check(failed == ["file002.dat"], f"the empty file went to failed/ with its reason: {failed}")
    # Each stored file names its sender's key in an extended attribute (read on b, through the
    # file system the daemon wrote to).
    names = [shlex.quote(ctx.lab.host_path(p)) for p in visible]
    job = ctx.lab.sh("b", "python3 -c 'import os, sys\nfor p in sys.argv[1:]:\n"
                          f"    print(os.getxattr(p, \"{XATTR}\").decode())' " + " ".join(names),
                     step="xattrs", check=False)
    values = [v.strip() for v in job.stdout().splitlines()]
    ctx.check(job.rc == 0 and len(values) == n and all(v == key_a.line for v in values),
              f"{XATTR} of each stored file is a's key line: {values} {job.stderr()[-300:]!r}")
    received = json_events(b_out, "received")
    ctx.check(len(received) == n and all(e.get("message", {}).get("format") == "secure" for e in received),
              f"{n} received events, format secure: {[e.get('message', {}).get('format') for e in received]}")
    ctx.check(all(e.get("sender", {}).get("key") == key_a.line and e["sender"].get("fingerprint") == key_a.fingerprint
                  for e in received), f"each received event carries a's key: {[e.get('sender') for e in received]}")
    ctx.check(len(lines_naming(res.job("b").stderr(), key_a.fingerprint)) >= n,
              "b's log names a's fingerprint for every message")
    delivered_events = json_events(a_out, "delivered")
    ctx.check(len(delivered_events) == n
              and all(e.get("message", {}).get("format") == "secure" and e.get("receiver", {}).get("key") == key_b.line
                      for e in delivered_events),
              f"{n} delivered events, format secure, receiver b's key: "
              f"{[(e.get('message', {}).get('format'), e.get('receiver')) for e in delivered_events]}")
    formats = {e.get("format") for e in json_events(a_out, "subscribed") + json_events(b_out, "subscribed")}
    ctx.check(formats == {"secure"}, f"every subscription was secure: {formats}")
    ctx.figure("secure_daemons_seconds", round(res.seconds, 1))


@scenario("secure-vs-apple-central", tags=("bletransfer", "daemon", "secure", "peers", "virtual"), conf="default")
def secure_vs_apple_central(ctx: Context):
    """A bleak central following Apple's flow against a secure sender daemon: not one payload byte."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    peers_a = authorize(ctx, "a", "a", [key_b])  # the real receiver's key; the bleak script has none
    payload = known_payload(4096, b"outbox")
    outbox, _, host_outbox, _ = prepare(ctx, [payload])
    record = ctx.path("central-values")
    central_address = address_of(ctx, "b")
    sender = daemon_job("sender", host_outbox, "false", 200, "--settle-time 0", trust=trust(key_a, peers_a))
    central = ctx.central(None, extra=f"--record {shlex.quote(record)} --scan-timeout 60 --message-timeout 30") \
        + "; echo CENTRAL-EXIT $?"
    res = ctx.lab.run(a=sender, b=central, b_after=("a", ADVERTISING), finish_with="b", deadline=230,
                      step="bleak central → secure sender")
    b_out = res.job("b").stdout()
    ctx.check("CONNECTED" in b_out, f"the central connected (so the daemon had something to refuse): {b_out[-400:]!r}")
    got = ctx.read(record)
    found = windows_found(got, payload_windows(payload))
    ctx.check(found == 0, f"the central got {len(got)} bytes, {found} 16-byte windows of the payload among them")
    ctx.check("RECEIVED" not in b_out, "the central completed no message")
    ctx.check([p.name for p in regular_files(outbox)] == ["file001.dat"]
              and (outbox / "file001.dat").read_bytes() == payload, "the outbox file is still there, unchanged")
    ctx.check(regular_files(outbox / "sent") == [], "nothing moved to sent/")
    ctx.check(json_events(res.job("a").stdout(), "delivered") == [], "no delivered event")
    named = [line for line in log_lines(res.job("a").stderr()) if lines_naming(line, central_address)]
    ctx.check(len(named) >= 1, f"a log line names the central's address {central_address}")
    ctx.figure("secure_vs_central_subscribed", "SUBSCRIBED" in b_out)
    ctx.figure("secure_vs_central_bytes_notified", len(got))
    ctx.figure("secure_vs_central_log_lines", len(named))
    print("\n".join(f"  a: {line}" for line in named[:3]))


@scenario("secure-vs-apple-peripheral", tags=("bletransfer", "daemon", "secure", "peers", "virtual", "extended"), conf="default")
def secure_vs_apple_peripheral(ctx: Context):
    """A bless peripheral following Apple's flow against a secure receiver daemon: nothing stored."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    peers_b = authorize(ctx, "b", "b", [key_a])  # a's real key; the bless script has none
    payload = known_payload(300, b"bless")
    msg = ctx.payload("message", payload)
    _, inbox, _, host_inbox = prepare(ctx, [])
    peripheral_address = address_of(ctx, "a")
    seconds = 45
    res = ctx.lab.run(a=ctx.peripheral(msg, chunk=20, count=0),
                      b=daemon_alive_job("receiver", host_inbox, seconds, trust(key_b, peers_b)),
                      b_after=("a", r"^READY"), finish_with="b", deadline=seconds + 60,
                      step="bless peripheral → secure receiver")
    b_out = res.job("b").stdout()
    done = re.search(r"DAEMON-DONE after (\d+) s", b_out)
    ctx.check("DAEMON-EXIT 0" in b_out and done is not None and int(done.group(1)) >= seconds,
              f"the daemon ran the whole {seconds} s and exited 0 on SIGTERM ({done.group(0) if done else 'no DAEMON-DONE'})")
    stored = [p.name for p in inbox.iterdir()] if inbox.exists() else []
    ctx.check(stored == [], f"nothing stored, not even a partial file: {stored}")
    ctx.check(json_events(b_out, "received") == [], "no received event")
    named = [line for line in log_lines(res.job("b").stderr()) if lines_naming(line, peripheral_address)]
    ctx.check(len(named) >= 1, f"a log line names the peripheral's address {peripheral_address}")
    ctx.figure("secure_vs_peripheral_log_lines", len(named))
    ctx.figure("secure_vs_peripheral_subscriptions", len(re.findall(r"^SUBSCRIBED", res.job("a").stdout(), re.M)))
    print("\n".join(f"  b: {line}" for line in named[:3]))


@scenario("secure-unauthorized-key", tags=("bletransfer", "daemon", "secure", "virtual", "long"), conf="default")
def secure_unauthorized_key(ctx: Context):
    """bletransfer with a key the other side does not list, as sender and as receiver: nothing passes."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    other_a, other_b = keygen(ctx, "a", "other-a"), keygen(ctx, "b", "other-b")

    # 1. A secure `send` on a whose key b's receiver daemon does not list (b lists another key).
    #    a itself lists b, so the handshake runs to the end and b is the side that refuses.
    payload = known_payload(2000, b"unauthorized sender")
    msg = ctx.payload("message", payload)
    _, inbox, _, host_inbox = prepare(ctx, [])
    send = (f"{SEND} --file {shlex.quote(msg)} --timeout 25 {trust(key_a, authorize(ctx, 'a', 'send', [key_b]))}"
            "; echo SEND-EXIT $?")
    receiver = daemon_job("receiver", host_inbox, "false", 150, trust=trust(key_b, authorize(ctx, "b", "daemon", [other_a])))
    res = ctx.lab.run(a=send, b=receiver, finish_with="a", deadline=180, step="unauthorized send → secure receiver")
    a_out, b_all = res.job("a").output(), res.job("b").output()
    stored = [p.name for p in inbox.iterdir()] if inbox.exists() else []
    ctx.check(stored == [], f"b stored nothing: {stored}")
    ctx.check(json_events(b_all, "received") == [], "b reported no message")
    refusal = lines_naming(b_all, key_a.fingerprint)
    ctx.check(len(refusal) >= 1, f"b's refusal names a's fingerprint {key_a.fingerprint}")
    status = re.search(r"SEND-EXIT (\d+)", a_out)
    ctx.check(status is not None and status.group(1) != "0", f"send did not succeed: {status.group(0) if status else '?'}")
    ctx.figure("unauthorized_sender_refusal", refusal[0].strip()[:160])
    ctx.figure("unauthorized_sender_names_b", bool(lines_naming(a_out, key_b.fingerprint)))

    # 2. A secure `receive` on b whose key a's sender daemon does not list (a lists another key).
    payload = known_payload(2000, b"unauthorized receiver")
    outbox, _, host_outbox, _ = prepare(ctx, [payload])
    out = ctx.path("received")
    sender = daemon_job("sender", host_outbox, "false", 150, "--settle-time 0",
                        trust=trust(key_a, authorize(ctx, "a", "daemon", [other_b])))
    receive = (f"{RECEIVE} --output {shlex.quote(out)} --timeout 25 {trust(key_b, authorize(ctx, 'b', 'receive', [key_a]))}"
               "; echo RECEIVE-EXIT $?")
    res = ctx.lab.run(a=sender, b=receive, b_after=("a", ADVERTISING), finish_with="b", deadline=180,
                      step="unauthorized receive ← secure sender")
    a_all, b_out = res.job("a").output(), res.job("b").output()
    ctx.check(ctx.read(out) == b"", "b received nothing")
    ctx.check(json_events(b_out, "received") == [], "b reported no message")
    status = re.search(r"RECEIVE-EXIT (\d+)", b_out)
    ctx.check(status is not None and status.group(1) != "0", f"receive did not succeed: {status.group(0) if status else '?'}")
    ctx.check([p.name for p in regular_files(outbox)] == ["file001.dat"]
              and (outbox / "file001.dat").read_bytes() == payload and regular_files(outbox / "sent") == [],
              "a's outbox unchanged, nothing in sent/")
    ctx.check(json_events(a_all, "delivered") == [], "a reported no delivery")
    refusal = lines_naming(a_all, key_b.fingerprint)
    ctx.check(len(refusal) >= 1, f"a's refusal names b's fingerprint {key_b.fingerprint}")
    ctx.figure("unauthorized_receiver_refusal", refusal[0].strip()[:160])
    ctx.figure("unauthorized_receiver_names_a", bool(lines_naming(b_out, key_a.fingerprint)))


@scenario("peers-addressing", tags=("bletransfer", "secure", "peers", "virtual"), conf="default")
def peers_addressing(ctx: Context):
    """`send --to` and `receive --from` between keyed hosts that list each other and one more
    peer: a message addressed to the other peer is not given to b; b does not take a message
    from a sender it was not told to take from; addressed rightly, it arrives, named."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    # A third host each side knows; its key is made on the guest and never used by a process.
    ghost_a, ghost_b = keygen(ctx, "a", "ghost-a"), keygen(ctx, "b", "ghost-b")
    trust_a = trust(key_a, authorize(ctx, "a", "a", [key_b, ghost_a]))
    trust_b = trust(key_b, authorize(ctx, "b", "b", [key_a, ghost_b]))
    payload = known_payload(3000, b"addressed")
    msg = ctx.payload("message", payload)

    def attempt(to: str, sender_from: str, label: str, seconds: int) -> tuple:
        out = ctx.path(f"received-{label}")
        from_option = f" --from {shlex.quote(sender_from)}" if sender_from else ""
        res = ctx.lab.run(
            a=f"{SEND} --file {shlex.quote(msg)} --timeout {seconds} --to {shlex.quote(to)} {trust_a}; echo SEND-EXIT $?",
            b=f"{RECEIVE} --output {shlex.quote(out)} --timeout {seconds}{from_option} {trust_b}; echo RECEIVE-EXIT $?",
            b_after=("a", ADVERTISING), deadline=seconds + 40, step=label)
        return res.job("a").output(), res.job("b").output(), out

    # 1. Addressed to the other peer: b is listed on a, but is not the addressee.
    a_out, b_out, out = attempt("lab-ghost-a", "", "send --to another peer", 20)
    ctx.check("SEND-EXIT 75" in a_out and json_events(a_out, "delivered") == [], "a delivered nothing and timed out (75)")
    ctx.check("RECEIVE-EXIT 75" in b_out and ctx.read(out) == b"", "b received nothing and timed out (75)")
    ctx.check(len(lines_naming(a_out, key_b.fingerprint)) >= 1, f"a's refusal names b's fingerprint {key_b.fingerprint}")

    # 2. b takes only from the other peer: a is listed on b, but is not the one asked for.
    a_out, b_out, out = attempt("lab-b", "lab-ghost-b", "receive --from another peer", 20)
    ctx.check("RECEIVE-EXIT 75" in b_out and ctx.read(out) == b"" and json_events(b_out, "received") == [],
              "b received nothing and timed out (75)")
    ctx.check("SEND-EXIT 75" in a_out and json_events(a_out, "delivered") == [], "a delivered nothing and timed out (75)")
    ctx.check(len(lines_naming(b_out, key_a.fingerprint)) >= 1, f"b's refusal names a's fingerprint {key_a.fingerprint}")

    # 3. Addressed rightly (by fingerprint on one side, by name on the other): it arrives.
    a_out, b_out, out = attempt(key_b.fingerprint, "lab-a", "addressed rightly", 90)
    ctx.check("SEND-EXIT 0" in a_out and "RECEIVE-EXIT 0" in b_out, "both ended with 0")
    ctx.check(ctx.read(out) == payload, "b stored the message whole")
    received = json_events(b_out, "received")
    sender = received[0].get("sender", {}) if received else {}
    ctx.check(sender.get("name") == "lab-a" and sender.get("authenticated") is True
              and sender.get("fingerprint") == key_a.fingerprint, f"the message is from lab-a, authenticated: {sender}")
    delivered = json_events(a_out, "delivered")
    receiver = delivered[0].get("receiver", {}) if delivered else {}
    ctx.check(receiver.get("name") == "lab-b" and receiver.get("fingerprint") == key_b.fingerprint,
              f"a delivered to lab-b: {receiver}")


@scenario("secure-no-plaintext", tags=("bletransfer", "secure"), conf="default")
def secure_no_plaintext(ctx: Context):
    """btmon on a during 16 KiB in Apple's flow, keyless framed and keyed framed: only Apple's flow shows the payload."""
    ctx.require_bletransfer()
    trust_a, trust_b = mutual_trust(ctx)
    payload = known_payload(16 * 1024, b"no plaintext")
    windows = payload_windows(payload)
    ctx.check(len(windows) == len(payload) - WINDOW + 1, "the payload's 16-byte windows are all different")
    msg = ctx.payload("message", payload)
    for mode, a_trust, b_trust, want_format in (("apple", "", "--compat", "compat"), ("keyless", "", "", "secure"),
                                                ("keyed", trust_a, trust_b, "secure")):
        capture = ctx.path(f"{mode}.snoop")
        out = ctx.path(f"{mode}-received")
        # A second btmon beside the lab's own, for this transfer only.
        a = (f"btmon -w {shlex.quote(capture)} >/dev/null 2>&1 & mon=$!; sleep 1\n"
             f"{SEND} --file {shlex.quote(msg)} --timeout 200 {a_trust}; rc=$?\n"
             "sleep 1; kill $mon; wait $mon; exit $rc")
        res = ctx.lab.run(a=a, b=f"{RECEIVE} --output {shlex.quote(out)} --timeout 200 {b_trust}",
                          b_after=("a", ADVERTISING), deadline=240, step=f"{mode} 16 KiB under btmon")
        received_events = json_events(res.job("b").stdout(), "received")
        got = ctx.read(out)
        if mode == "apple":
            # Apple's format over a link with enhanced ATT bearers (this is BlueZ's stock
            # configuration) may arrive with values swapped, and then says so (orderAtRisk): the
            # documented behaviour, as in the stock scenarios. What matters here is the capture.
            # On a radio, bluetoothd's multiple-value notifications over several bearers lost a
            # value now and then (a 512-byte value of 64 KiB, the lab's linux-default link):
            # Apple's format cannot tell, and both sides flag the message at risk.
            at_risk = any(e.get("message", {}).get("orderAtRisk") for e in received_events)
            ctx.check(got == payload or at_risk,
                      f"apple: the payload arrived intact, or changed by EATT and flagged orderAtRisk")
            if got != payload:
                ctx.figure("secure_no_plaintext_apple_eatt_bytes_kept", len(got))
        else:
            ctx.check(got == payload, f"{mode}: the payload arrived intact")
        formats = [e.get("message", {}).get("format") for e in received_events]
        ctx.check(formats == [want_format], f"{mode}: received as {formats}")
        data = ctx.read(capture)
        # btsnoop keeps each HCI fragment as a record of its own, and under TCG the monitor
        # socket may drop some: a capture in clear is smaller than the payload and shows a part
        # of its windows (12974 of 65521 in one run of the retired unencrypted framing), never all.
        ctx.check(len(data) >= len(payload) // 4, f"{mode}: the capture holds the transfer ({len(data)} bytes)")
        found = windows_found(data, windows)
        ctx.figure(f"btmon_{mode}_capture_bytes", len(data))
        ctx.figure(f"btmon_{mode}_payload_windows", found)
        if mode == "apple":
            # The check below can fail: a capture of Apple's flow (clear text) shows the payload.
            ctx.check(found >= len(payload) // 64, f"apple: {found} payload windows in the capture (the check sees plaintext)")
        else:
            ctx.check(found == 0, f"{mode}: {found} 16-byte windows of the payload in the capture")


def daemon_pair_run(ctx: Context, payloads: list, key_a: Key, key_b: Key, peers_a: str, peers_b: str,
                    label: str, deadline: int) -> tuple:
    """Secure daemons a → b over an outbox holding `payloads` (file001.dat …), until b stored
    them all. Returns (seconds from b's daemon start to the last file stored, a's output, b's
    output, outbox, inbox).

    The daemons' folders are on each guest's own tmpfs, as a user's are on a local disk: in the
    run folder (9p under TCG) every file operation of the measured run, a dozen per message on
    each side, crossed to the host. They are copied from and back to the run folder around the
    run, so the checks read them there. Their output goes to the guest's tmpfs too, replayed
    into the job's once they exited (`daemon_output`)."""
    base = ctx.lab.run_dir / "payloads" / ctx.name / label
    if base.exists():
        shutil.rmtree(base)
    outbox, inbox = base / "outbox", base / "inbox"
    outbox.mkdir(parents=True)
    inbox.mkdir(parents=True)
    for i, data in enumerate(payloads, 1):
        hidden = outbox / f".file{i:03d}.dat"
        hidden.write_bytes(data)
        os.utime(hidden, (1_700_000_000 + i, 1_700_000_000 + i))
        hidden.rename(outbox / f"file{i:03d}.dat")
    host_outbox, host_inbox = ctx.lab.host_path(outbox), ctx.lab.host_path(inbox)
    # ctx.name and label are plain words: these paths need no quoting.
    local = f"/tmp/bletransfer-lab-folders/{ctx.name}/{label}"
    local_outbox, local_inbox = f"{local}/outbox", f"{local}/inbox"
    n = len(payloads)
    drained = f'[ "$({count_files(local_outbox)})" -eq 0 ]'
    sender_job = daemon_job("sender", local_outbox, drained, deadline, "--settle-time 0", trust=trust(key_a, peers_a),
                            output_on_guest=True)
    redirect, replay = daemon_output(True)
    sender = (f"rm -rf {local} && mkdir -p {local} && cp -a {shlex.quote(host_outbox)} {local_outbox} || exit 1\n"
              f"(\n{sender_job})\n"
              f"rc=$?\nrm -rf {shlex.quote(host_outbox)} && cp -a {local_outbox} {shlex.quote(host_outbox)}\nexit $rc\n")
    # The receiver's clock at its daemon's start and when the inbox first holds all n files
    # (looked at every 0.1 s: stamping every output line would cost a process per line). The
    # files arrive in the outbox's order, so the look is one stat of the last name and a count
    # only once that is there: counting a hundred files every 0.1 s took a quarter of b's CPU.
    last = f"{local_inbox}/file{n:03d}.dat"
    receiver = (f"rm -rf {local} && mkdir -p {local_inbox} || exit 1\n"
                f'"$BLETRANSFER_BIN" daemon --role receiver --adapter hci0 --output-dir {local_inbox} '
                f'--json {trust(key_b, peers_b)}{redirect} &\n'
                f'pid=$!\nt0=$EPOCHREALTIME\nend=$((SECONDS + {deadline}))\n'
                f'while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null '
                f'&& ! {{ [ -f {last} ] && [ "$({count_files(local_inbox)})" -ge {n} ]; }}; '
                f'do lab_pause 0.1; done\n'
                f'echo "ALL-STORED $t0 $EPOCHREALTIME"\n'
                f'kill -TERM $pid; wait $pid; rc=$?\n{replay}echo "DAEMON-EXIT $rc"\n'
                f'cp -a {local_inbox}/. {shlex.quote(host_inbox)}/\nexit $rc\n')
    res = ctx.lab.run(a=sender, b=receiver, deadline=deadline + 60, step=label)
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, f"{label}: both daemons exited 0 on SIGTERM")
    stored = re.search(r"^ALL-STORED ([0-9.]+) ([0-9.]+)$", b_out, re.M)
    ctx.check(stored is not None and len(json_events(b_out, "received")) == n,
              f"{label}: all {n} stored, {len(json_events(b_out, 'received'))} received events")
    return round(float(stored.group(2)) - float(stored.group(1)), 2), a_out, b_out, outbox, inbox


# =============================================================================================
@scenario("secure-multi", tags=("bletransfer", "daemon", "secure", "throughput", "virtual"), conf="default")
def secure_multi(ctx: Context):
    """Secure daemons a → b: 100 files of 4 KiB over few connections, each between two runs of
    one 400 KiB file: big, hundred, big. On the instant profile, where the guests' CPUs set the
    pace and it drifts within minutes, three rounds (big, hundred, big, hundred, big, hundred,
    big) and the median counts; on a timed profile the radio sets it, and one round does."""
    timed = ctx.link_profile.timed
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    bigs, hundreds = [], []

    def one_big(label: str) -> None:
        big = os.urandom(400 * 1024)
        seconds, _, b_out, _, inbox_big = daemon_pair_run(ctx, [big], key_a, key_b, peers_a, peers_b, label,
                                                          deadline=300)
        ctx.check([p.read_bytes() for p in regular_files(inbox_big)] == [big], f"{label}: the 400 KiB file arrived bit-identical")
        bigs.append((seconds, connected_to_stored(b_out)))

    def one_hundred(label: str) -> None:
        small = [os.urandom(4096) for _ in range(100)]
        seconds, a_out, b_out, outbox, inbox = daemon_pair_run(ctx, small, key_a, key_b, peers_a, peers_b, label, deadline=600)
        stored = {p.name: p.read_bytes() for p in regular_files(inbox)}
        want = {f"file{i:03d}.dat": data for i, data in enumerate(small, 1)}
        ctx.check(stored == want, f"{label}: all 100 stored bit-identical under their outbox names "
                                  f"({len(stored)} stored, {sum(1 for k, v in want.items() if stored.get(k) == v)} match)")
        ctx.check(regular_files(outbox) == [] and len(regular_files(outbox / "sent")) == 100,
                  f"{label}: outbox empty, sent/ holds {len(regular_files(outbox / 'sent'))} of 100")
        delivered = json_events(a_out, "delivered")
        ctx.check(len(delivered) == 100 and all(e.get("message", {}).get("format") == "secure" for e in delivered),
                  f"{label}: a counted 100 secure deliveries, one per ACK: {len(delivered)}")
        visits = len(json_events(b_out, "connected"))
        ctx.check(1 <= visits <= 10, f"{label}: the 100 files took few connections: {visits}")
        hundreds.append({"seconds": seconds, "link": connected_to_stored(b_out), "visits": visits,
                         "subscriptions": len(json_events(a_out, "subscribed")), "gaps": received_gaps_ms(b_out)})

    one_big("big-1")
    for round_number in ((1,) if timed else (1, 2, 3)):
        one_hundred(f"hundred-{round_number}")
        one_big(f"big-{round_number + 1}")

    # Each hundred against the mean of the 400 KiB runs on either side of it; the median of
    # the three. On the link: from b's first connection to its last stored file, which leaves
    # out the daemons' start and the scan (seconds that differ from run to run and are the same
    # for one file or a hundred); from the daemon's start as well, for comparison.
    def ratios(key: str, index: int) -> list:
        """Each hundred's `key` over the mean of the 400 KiB runs' field `index` either side."""
        found = []
        for i, hundred in enumerate(hundreds):
            before, after = bigs[i][index], bigs[i + 1][index]
            if hundred[key] is not None and before and after:
                found.append(round(hundred[key] / ((before + after) / 2), 2))
        return found

    from_start = ratios("seconds", 0)
    ctx.figure("multi_100x4kib_seconds", "/".join(str(h["seconds"]) for h in hundreds))
    ctx.figure("multi_400kib_seconds", "/".join(str(b[0]) for b in bigs))
    ctx.figure("multi_ratio_from_start", statistics.median(from_start))
    link = ratios("link", 1)
    if len(link) == len(hundreds):
        ctx.figure("multi_100x4kib_link_seconds", "/".join(str(h["link"]) for h in hundreds))
        ctx.figure("multi_400kib_link_seconds", "/".join(str(b[1]) for b in bigs))
        ctx.figure("multi_ratio", statistics.median(link))
        ctx.figure("multi_ratios", "/".join(str(r) for r in link))
        ctx.figure("multi_ratio_spread", round(max(link) - min(link), 2))
        # Where the hundred's extra time goes: the median gap between two files stored, and
        # what of it is beyond 4 KiB at the 400 KiB runs' rate (a message's fixed cost).
        gaps = sorted(g for h in hundreds for g in h["gaps"])
        link_big = statistics.mean(b[1] for b in bigs)
        if gaps:
            ctx.figure("multi_stored_gap_ms_median", gaps[len(gaps) // 2])
            ctx.figure("multi_stored_gap_ms_p90", gaps[len(gaps) * 9 // 10])
            ctx.figure("multi_fixed_cost_ms_per_message", round(gaps[len(gaps) // 2] - 4096 / (400 * 1024) * link_big * 1000))
    ctx.figure("multi_visits", "/".join(str(h["visits"]) for h in hundreds))
    ctx.figure("multi_sender_subscriptions", "/".join(str(h["subscriptions"]) for h in hundreds))
    # Issue #26's goal is a ratio ≤ 1.25: reported, not asserted (a figure of a shared emulated
    # link). A ratio far above it means messages went back to one visit each.
    ctx.check(max(from_start) <= 6.0, f"100 × 4 KiB within 6 times the time of one 400 KiB file: {from_start}")


def received_gaps_ms(b_out: str) -> list:
    """Milliseconds between consecutive `received` events of the receiver, sorted."""
    times = [e["unixTime"] for e in json_events(b_out, "received")]
    return sorted(round((later - earlier) * 1000) for earlier, later in zip(times, times[1:]))


def connected_to_stored(b_out: str) -> float | None:
    """Seconds from the receiver daemon's first `connected` event to its last `received`."""
    connected, received = json_events(b_out, "connected"), json_events(b_out, "received")
    if not connected or not received:
        return None
    return round(received[-1]["unixTime"] - connected[0]["unixTime"], 2)


# =============================================================================================
@scenario("secure-throughput", tags=("bletransfer", "secure", "throughput", "long"), conf="default")
def secure_throughput(ctx: Context):
    """1 MiB between keyless hosts and 1 MiB between keyed hosts, a → b, in the same run: seconds, ratio, handshake cost."""
    ctx.require_bletransfer()
    trust_a, trust_b = mutual_trust(ctx)
    payload = os.urandom(1024 * 1024)
    msg = ctx.payload("message", payload)
    seconds = {}
    for mode, a_trust, b_trust, want_format in (("keyless", "", "", "secure"), ("secure", trust_a, trust_b, "secure")):
        out = ctx.path(f"{mode}-received")
        res = ctx.lab.run(a=stamped(f"{SEND} --file {shlex.quote(msg)} --timeout 600 {a_trust}"),
                          b=stamped(f"{RECEIVE} --output {shlex.quote(out)} --timeout 600 {b_trust}"),
                          b_after=("a", ADVERTISING), deadline=660, step=f"{mode} 1 MiB",
                          finish_with="b")  # a receiver that gave up leaves send waiting for nothing
        ctx.check(ctx.read(out) == payload, f"{mode}: 1 MiB arrived intact")
        text = res.job("b").stdout()
        received = stamped_events(text, "received")
        ctx.check(len(received) == 1 and received[0]["message"].get("format") == want_format,
                  f"{mode}: one message received as {want_format}: {[r['message'].get('format') for r in received]}")
        seconds[mode] = float(received[0]["message"]["seconds"])
        ctx.figure(f"{mode}_1mib_seconds", round(seconds[mode], 2))
        ctx.figure(f"{mode}_1mib_run_seconds", round(res.seconds, 1))
        # The handshake's cost, on each side's own clock: the sender from the subscription to
        # the first payload byte handed over; the receiver (whose `subscribed` comes with the
        # first value, once the format is known) from the connection to the first payload byte.
        a_text = res.job("a").stdout()
        # The first progress event with a byte of payload (a secure receiver reports 0 bytes
        # once the handshake starts); JSON keys are sorted, "bytes" comes before "event".
        first_payload = r'^\{"bytes":[1-9][0-9]*,.*"event":"progress"'
        subscribed, sent = first_at(a_text, r'"event":"subscribed"'), first_at(a_text, first_payload)
        connected, got = first_at(text, r'"event":"connected"'), first_at(text, first_payload)
        ctx.check(None not in (subscribed, sent, connected, got),
                  f"{mode}: subscription {subscribed} / first byte {sent} on a, connection {connected} / first byte {got} on b")
        ctx.figure(f"{mode}_subscribed_to_first_byte_s", round(sent - subscribed, 2))
        ctx.figure(f"{mode}_connected_to_first_byte_s", round(got - connected, 2))
    ratio = seconds["keyless"] / seconds["secure"]
    # Both are encrypted; listed keys should cost nothing more (≈ 1). Reported, not asserted:
    # TCG guests on a shared machine are not radios.
    ctx.figure("secure_throughput_ratio", round(ratio, 3))


def resume_setup(ctx: Context, size: int, deadline: int) -> tuple:
    """What every resume run starts from: fresh keys on both guests, each side listing the
    other's; one file of `size` random bytes in a's outbox, an empty inbox and an emptied spool
    (guest-local) for b. Returns (the payload, the inbox, the inbox as the guests see it, the
    spool, a's sender daemon job, which runs until the outbox is empty or `deadline` s, and the
    command that starts b's receiver daemon with the spool)."""
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    payload = os.urandom(size)
    _, inbox, host_outbox, host_inbox = prepare(ctx, [payload])
    spool = f"{KEY_DIR}/{ctx.name}/spool"
    ctx.lab.sh("b", f"rm -rf {spool}", step="empty spool")
    sender = daemon_job("sender", host_outbox, f'[ "$({count_files(host_outbox)})" -eq 0 ]', deadline,
                        "--settle-time 0", trust=trust(key_a, peers_a))
    receive = (f'"$BLETRANSFER_BIN" daemon --role receiver --adapter hci0 --output-dir {shlex.quote(host_inbox)} '
               f'--json --spool-dir {spool} {trust(key_b, peers_b)}')
    return payload, inbox, host_inbox, spool, sender, receive


def check_resumed_delivery(ctx: Context, a_out: str, b_out: str, inbox: Path, payload: bytes) -> int:
    """The checks every resume run ends with: `payload` stored once in `inbox`, bit-identical,
    nothing partial beside it; one `received` event on b (`b_out`), resumed; one `delivered`
    event on a (`a_out`). Returns the payload bytes a counted on the air."""
    stored = [p.read_bytes() for p in regular_files(inbox)]
    ctx.check(stored == [payload], f"the file arrived once, bit-identical ({[len(s) for s in stored]} bytes stored)")
    ctx.check(not [p.name for p in regular_files(inbox) if p.name.startswith(".")], "nothing partial in the output directory")
    received = json_events(b_out, "received")
    ctx.check(len(received) == 1 and received[0].get("resumedFrom", 0) > 0,
              f"one received event, resumed: {[e.get('resumedFrom') for e in received]}")
    delivered = json_events(a_out, "delivered")
    on_air = delivered[0].get("payloadBytesOnAir") if len(delivered) == 1 else None
    ctx.check(on_air is not None and on_air >= len(payload),
              f"a delivered once and counted its payload bytes on the air: {on_air}")
    return on_air


def resume_run(ctx: Context, size: int, cuts: tuple, deadline: int) -> None:
    """Secure daemons a → b over one file of `size` bytes; b's receiver daemon is stopped
    (SIGTERM) once it reports each fraction of `cuts` of the message and started again with
    the same spool; the last one runs until the file is stored."""
    payload, inbox, host_inbox, spool, sender, receive = resume_setup(ctx, size, deadline)
    thresholds = " ".join(str(int(size * c)) for c in cuts)
    # Each visit's output goes to its own file (the byte counts of one daemon instance), then
    # to stdout. The spool's mode and entry sizes are printed after each stop.
    receiver = (f't0=$(date +%s.%N)\nend=$((SECONDS + {deadline}))\ni=0\n'
                f'for cut in {thresholds}; do\n'
                f'  i=$((i + 1)); out=/tmp/resume-visit-$i.out\n'
                f'  {receive} > $out 2>&1 &\n  pid=$!\n'
                f'  while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null; do\n'
                f'    got=$(grep -o \'"bytes":[0-9]*\' $out | tail -1 | cut -d: -f2)\n'
                f'    [ "${{got:-0}}" -ge $cut ] && break\n    sleep 0.2\n  done\n'
                f'  kill -TERM $pid; wait $pid; echo "VISIT $i STOPPED rc=$? at ${{got:-0}} bytes"\n'
                f'  cat $out\n'
                f'  echo "SPOOL $(stat -c %a {spool}) $(find {spool} -type f -name \'*.part\' -printf \'%m:%s \')"\n'
                f'done\n'
                f'out=/tmp/resume-visit-last.out\n{receive} > $out 2>&1 &\npid=$!\n'
                f'while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null && [ "$({count_files(host_inbox)})" -lt 1 ]; '
                f'do lab_pause 0.1; done\n'
                f'echo "ALL-STORED $t0 $(date +%s.%N)"\n'
                f'kill -TERM $pid; wait $pid; rc=$?; cat $out\n'
                f'echo "SPOOL-AFTER $(find {spool} -type f -name \'*.part\' | wc -l)"\necho "DAEMON-EXIT $rc"; exit $rc\n')
    res = ctx.lab.run(a=sender, b=receiver, deadline=deadline + 60, step="resume")
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, "both daemons exited 0 on SIGTERM")
    stopped = [int(n) for n in re.findall(r"^VISIT \d+ STOPPED rc=0 at (\d+) bytes$", b_out, re.M)]
    ctx.check(len(stopped) == len(cuts) and all(n >= int(size * c) for n, c in zip(stopped, cuts)),
              f"the receiver was stopped {len(cuts)} times at {[round(c * 100) for c in cuts]} %: {stopped} bytes")
    spools = re.findall(r"^SPOOL (\d+) (.*)$", b_out, re.M)
    ctx.check(len(spools) == len(cuts) and all(mode == "700" and re.fullmatch(r"600:\d+ ", files) for mode, files in spools),
              f"after each stop the spool (0700) held one entry (0600): {spools}")
    held = [int(files.split(":")[1]) for _, files in spools if ":" in files]
    ctx.check(all(h >= n - 8192 for h, n in zip(held, stopped)), f"each entry held what the visit had verified: {held}")
    ctx.check("SPOOL-AFTER 0" in b_out, "the spool entry went once the file was stored")
    on_air = check_resumed_delivery(ctx, a_out, b_out, inbox, payload)
    resumed_lines = lines_naming(res.job("a").stderr(), "continuing from there")
    ctx.check(len(resumed_lines) == len(cuts), f"a continued {len(cuts)} times from b's checkpoint: {len(resumed_lines)}")
    visits = len(json_events(b_out, "connected"))
    times = re.search(r"^ALL-STORED ([0-9.]+) ([0-9.]+)$", b_out, re.M)
    ratio = round(on_air / size, 3)
    ctx.figure("resume_restart_bytes_on_air_ratio", ratio)
    ctx.figure("resume_restart_seconds", round(float(times.group(2)) - float(times.group(1)), 1) if times else None)
    ctx.figure("resume_restart_visits", visits)
    # Not the 1.2 goal: while the stopped receiver daemon winds down (about 10 s in the lab)
    # the link stays up and the sender keeps notifying into it. Starting again from byte 0
    # would cost at least 1.5 plus that.
    ctx.check(ratio < 1.5 + 0.5 * len(cuts), f"payload bytes on the air below a restart from 0: {ratio}")


def at_least(threshold: int) -> str:
    """A regex for a decimal integer ≥ `threshold` (no leading zeros)."""
    digits = str(threshold)
    options = [rf"[1-9][0-9]{{{len(digits)},}}"]  # more digits
    for i, d in enumerate(digits):
        if d != "9":
            options.append(digits[:i] + f"[{int(d) + 1}-9]" + (f"[0-9]{{{len(digits) - i - 1}}}" if i < len(digits) - 1 else ""))
    options.append(digits)
    return "(?:" + "|".join(options) + ")"


def power_cycle(host: str, outage: float):
    """A timeline action: `host`'s adapter off, `outage` seconds, on again."""
    def action(lab) -> None:
        scenarios.say(f"  {host} adapter off for {outage:.0f} s")
        lab.fault(host, "power-off")
        time.sleep(outage)
        lab.fault(host, "power-on")
    return action


def resume_link_cut_run(ctx: Context, size: int, cuts: tuple, deadline: int, outage: float = 5.0) -> None:
    """Secure daemons a → b over one file of `size` bytes; the link is cut once b's receiver
    reports each fraction of `cuts` of the message — b's adapter powered off, on again `outage`
    s later — and both daemons keep running: each visit after a cut continues from b's spool.

    Why a power cycle and not the relay's radio cut (`link cut`): with the relay cut, the
    emulated controllers keep taking ACL data until the restore, so the sender's socket keeps
    accepting notifications for the whole outage (measured: 15 s at the link's full rate), which
    a real controller, out of credits, would refuse within a few KiB; that would measure the
    emulation, not resume. Powering b's adapter off drops the connection at once on both sides."""
    payload, inbox, host_inbox, spool, sender, receive = resume_setup(ctx, size, deadline)
    receiver = (f'{receive} &\n'
                f'pid=$!\nt0=$(date +%s.%N)\nend=$((SECONDS + {deadline}))\n'
                f'while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null && [ "$({count_files(host_inbox)})" -lt 1 ]; '
                f'do lab_pause 0.1; done\n'
                f'echo "ALL-STORED $t0 $(date +%s.%N)"\n'
                f'echo "SPOOL-AFTER $(stat -c %a {spool}) $(find {spool} -type f -name \'*.part\' | wc -l)"\n'
                f'kill -TERM $pid; wait $pid; rc=$?; echo "DAEMON-EXIT $rc"; exit $rc\n')
    timeline = []
    for fraction in cuts:
        progress = rf'"bytes":{at_least(int(size * fraction))},[^\n]*"event":"progress"'
        # Off (confirmed: hci0 down), the outage, on: in sequence, so that the power-on cannot
        # overtake the power-off's check (the run's other triggers wait meanwhile).
        timeline.append((("b", progress, 0.0), power_cycle("b", outage)))
    res = ctx.lab.run(a=sender, b=receiver, deadline=deadline + 60, step="resume", timeline=tuple(timeline))
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, "both daemons exited 0 on SIGTERM")
    ctx.check("SPOOL-AFTER 700 0" in b_out, "the spool (0700) is empty once the file was stored")
    on_air = check_resumed_delivery(ctx, a_out, b_out, inbox, payload)
    resumes = len(lines_naming(res.job("a").stderr(), "continuing from there"))
    ctx.check(resumes >= 1, f"a continued from b's checkpoint: {resumes} times")
    visits = len(json_events(b_out, "connected"))
    times = re.search(r"^ALL-STORED ([0-9.]+) ([0-9.]+)$", b_out, re.M)
    label = "resume" if len(cuts) == 3 else "resume_ci"
    ratio = round(on_air / size, 3)
    # What was in flight when the link died: how far a's stream had got when its visit ended
    # ("after N of M bytes") beyond what b held at the next visit ("holds K bytes"). Without
    # the flow window this was deep in the lab (100 to 320 KB a cut): b's bluetoothd and
    # receiver, CPU-bound under TCG, read slower than the emulated link takes values, and
    # every queue between a's socket and b's let a's stream run ahead. With `window` a's
    # stream stays within 64 KiB of what b reported holding, and b reports only what its
    # spool already holds.
    a_err = res.job("a").stderr()
    ends = [int(n) for n in re.findall(r"after (\d+) of \d+ bytes", a_err)]
    holds = [int(n) for n in re.findall(r"holds (\d+) bytes of message", a_err)]
    lost = sum(max(0, n - k) for n, k in zip(ends, holds))
    ctx.figure(f"{label}_bytes_on_air_ratio", ratio)
    ctx.figure(f"{label}_lost_in_flight_bytes", lost)
    ctx.figure(f"{label}_ratio_without_in_flight", round((on_air - lost) / size, 3))
    ctx.figure(f"{label}_seconds", round(float(times.group(2)) - float(times.group(1)), 1) if times else None)
    ctx.figure(f"{label}_visits", visits)
    ctx.figure(f"{label}_resumes", resumes)
    # Issue #13's goal: at most 1.2 × the payload on the air, the bytes in flight at the cuts
    # included; what was in flight at most the window (64 KiB) a cut.
    ctx.check(lost <= len(cuts) * 64 * 1024,
              f"in flight at the cuts at most the flow window (64 KiB) each: {lost} bytes over {len(cuts)} cuts")
    ctx.check(ratio <= 1.2, f"payload bytes on the air at most 1.2 × the file: {ratio}")


@scenario("secure-resume", tags=("bletransfer", "daemon", "secure", "faults", "virtual", "long"), conf="default")
def secure_resume(ctx: Context):
    """Secure daemons a → b: 4 MiB, the link cut (b's adapter off) at about 25, 50 and 75 %: resumed each time."""
    resume_link_cut_run(ctx, 4 * 1024 * 1024, (0.25, 0.5, 0.75), deadline=900)


@scenario("secure-resume-ci", tags=("bletransfer", "daemon", "secure", "faults", "virtual"), conf="default")
def secure_resume_ci(ctx: Context):
    """Secure daemons a → b: 384 KiB, the link cut (b's adapter off) once at about 50 %: resumed
    (secure-resume, long, cuts 4 MiB three times)."""
    resume_link_cut_run(ctx, 384 * 1024, (0.5,), deadline=400)


@scenario("secure-resume-restart", tags=("bletransfer", "daemon", "secure", "faults", "virtual", "extended"), conf="default")
def secure_resume_restart(ctx: Context):
    """Secure daemons a → b: 384 KiB, b's receiver daemon stopped at about 50 % and started again:
    resumed."""
    resume_run(ctx, 384 * 1024, (0.5,), deadline=400)


if __name__ == "__main__":
    sys.exit(scenarios.main())


@scenario("chaos-exactly-once", tags=("bletransfer", "daemon", "secure", "faults", "virtual"), conf="default")
def chaos_exactly_once(ctx: Context):
    """Keyed daemons a → b, five outbox files; b's receiver daemon is SIGKILLed each time a
    new file appears in its inbox (so, often, between storing a file and its sender seeing the
    ACK) and started again: every file arrives exactly once, none numbered as a second copy."""
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    # Five files keep it within CI's time (each kill costs a restart, a discovery and a
    # handshake, seconds on a 50 ms link); chaos-forty (long) runs forty through kills of both
    # daemons and power cycles.
    payloads = [os.urandom(n) for n in (3000, 40, 12000, 1, 2500)]
    n = len(payloads)
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, payloads)
    spool = f"{KEY_DIR}/{ctx.name}/spool"
    ctx.lab.sh("b", f"rm -rf {spool}", step="empty spool")
    sender = daemon_job("sender", host_outbox, f'[ "$({count_files(host_outbox)})" -eq 0 ]', 420,
                        "--settle-time 0", trust=trust(key_a, peers_a))
    count = count_files(host_inbox)
    receiver = (f'kills=0; end=$((SECONDS + 420))\n'
                f'while [ $SECONDS -lt $end ] && [ "$({count})" -lt {n} ]; do\n'
                f'  "$BLETRANSFER_BIN" daemon --role receiver --adapter hci0 --output-dir {shlex.quote(host_inbox)} '
                f'--json --spool-dir {spool} {trust(key_b, peers_b)} &\n'
                f'  pid=$!; before=$({count})\n'
                f'  while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null && [ "$({count})" -le "$before" ]; do sleep 0.05; done\n'
                f'  kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null; kills=$((kills + 1))\n'
                f'done\n'
                # The last file may have been stored just before its kill: one more run lets a
                # sender that did not see its ACK send it again, and the journal answer it.
                f'"$BLETRANSFER_BIN" daemon --role receiver --adapter hci0 --output-dir {shlex.quote(host_inbox)} '
                f'--json --spool-dir {spool} {trust(key_b, peers_b)} &\n'
                f'pid=$!; t=$((SECONDS + 60)); while [ $SECONDS -lt $t ] && [ -n "$(ls -A {shlex.quote(host_outbox)} | grep -v "^sent$")" ]; '
                f'do sleep 0.5; done\n'
                f'kill -TERM $pid; wait $pid; echo "KILLS $kills"\n')
    res = ctx.lab.run(a=sender, b=receiver, deadline=520, step="five files through receiver kills")
    stored = regular_files(inbox)
    names = sorted(p.name for p in stored)
    expected = [f"file{i:03d}.dat" for i in range(1, n + 1)]
    ctx.check(names == expected, f"each file stored once under its own name: {names}")
    for i, data in enumerate(payloads, 1):
        path = inbox / f"file{i:03d}.dat"
        ctx.check(path.exists() and path.read_bytes() == data, f"file{i:03d}.dat bit-identical")
    ctx.check(regular_files(outbox) == [], "a's outbox is empty (every file delivered and moved to sent/)")
    b_all = res.job("b").output()
    kills = re.search(r"KILLS (\d+)", b_all)
    ctx.figure("chaos_receiver_kills", int(kills.group(1)) if kills else None)
    ctx.figure("chaos_sent_again_acknowledged", len(lines_naming(b_all, "not stored twice")))
    ctx.figure("chaos_files", n)


@scenario("peers-revocation", tags=("bletransfer", "daemon", "secure", "peers", "virtual", "extended"), conf="default")
def peers_revocation(ctx: Context):
    """Keyed daemons a → b: a first file arrives (in b's folder for a: --folder-per-sender);
    then a's key is removed from b's
    authorized-peers file with `bletransfer peers remove` while b's daemon runs, and a second
    file put into a's outbox: b refuses a on its next connection, without a restart."""
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    first, second = os.urandom(3000), os.urandom(3000)
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, [first])
    sender = daemon_job("sender", host_outbox, "false", 150, "--settle-time 0", trust=trust(key_a, peers_a))
    receiver = daemon_job("receiver", host_inbox, "[ $SECONDS -ge 50 ]", 60, "--folder-per-sender",
                          trust=trust(key_b, peers_b))

    def revoke_and_offer(lab) -> None:
        lab.sh("b", f'"$BLETRANSFER_BIN" peers remove lab-a --authorized-peers {peers_b}', step="peers remove lab-a")
        (outbox / ".file002.dat").write_bytes(second)
        # Moved in on a itself, so that a's inotify sees it at once (the run folder is 9p:
        # a change made on this side reaches a's daemon only at its next rescan).
        lab.sh("a", f"mv {shlex.quote(host_outbox)}/.file002.dat {shlex.quote(host_outbox)}/file002.dat",
               step="file002.dat into a's outbox")
        scenarios.say("  a's key removed from b's list; file002.dat put into a's outbox")

    res = ctx.lab.run(a=sender, b=receiver, finish_with="b", deadline=180, step="revocation on a running daemon",
                      timeline=((("b", r'"event":"received"', 1.0), revoke_and_offer),))
    stored = sorted(str(p.relative_to(inbox)) for p in inbox.rglob("*") if p.is_file())
    ctx.check(stored == ["lab-a/file001.dat"] and (inbox / "lab-a" / "file001.dat").read_bytes() == first,
              f"only the first file was stored, in a's folder (--folder-per-sender): {stored}")
    ctx.check((outbox / "file002.dat").exists(), "a still holds the second file")
    b_all = res.job("b").output()
    refusals = [e for e in json_events(b_all, "refused")
                if e.get("bound") == "authorized-peers" and key_a.fingerprint in e.get("reason", "")]
    ctx.check(len(refusals) >= 1, f"b refused a's key {key_a.fingerprint} once it was removed")
    ctx.check("DAEMON-EXIT 0" in b_all, "b's daemon ran through, no restart")
    ctx.figure("revocation_refusal", refusals[0].get("reason", "")[:160] if refusals else None)


def default_home(ctx: Context, host: str) -> str:
    """`XDG_CONFIG_HOME=…` for commands on `host`: the default identity and authorized-peers
    files live under it, so no trust option is given (secure by default)."""
    return f"XDG_CONFIG_HOME={KEY_DIR}/{ctx.name}/config-{host}"


def default_keygen(ctx: Context, host: str, label: str) -> Key:
    """A new identity at `host`'s default path, named lab-<label>."""
    env = default_home(ctx, host)
    job = ctx.lab.sh(host, f'rm -rf {KEY_DIR}/{ctx.name}/config-{host} && '
                           f'{env} "$BLETRANSFER_BIN" keygen --name lab-{label} >/dev/null && {env} "$BLETRANSFER_BIN" id',
                     step=f"keygen {label} (default path)")
    lines = job.stdout().splitlines()
    line = next((s.strip() for s in lines if s.startswith("bletransfer-x25519 ")), "")
    fingerprint = next((s.strip() for s in lines if s.startswith("SHA256:")), "")
    ctx.check(line.endswith(f" lab-{label}") and fingerprint != "", f"keygen on {host}: {job.stdout()!r}")
    return Key(line, fingerprint, f"{KEY_DIR}/{ctx.name}/config-{host}/bletransfer/identity", host)


def pair_run(ctx: Context, answer_a: str, answer_b: str, label: str, early_a: str = "", early_b: str = "") -> tuple:
    """`bletransfer pair` on both guests at once with the default files, each on a
    pseudo-terminal (peers/pair_terminal.py: a person at a terminal), typing `early_*` before the
    question appears and `answer_*` at it (`other`: the code the other guest shows, `decline`,
    `own`: this guest's own code); their outputs with `PAIR-EXIT <status>` appended."""
    shown = {host: ctx.path(f"{label}-shown-{host}".replace(" ", "-").replace(",", "")) for host in "ab"}
    for path in shown.values():
        if os.path.exists(path):
            os.unlink(path)

    def command(host: str, answer: str, early: str) -> str:
        other = "b" if host == "a" else "a"
        return (f'{default_home(ctx, host)} "$LAB_PYTHON" "$LAB_PEERS/pair_terminal.py" '
                f'--early {shlex.quote(early)} --answer {shlex.quote(answer)} '
                f'--shown-file {shlex.quote(shown[host])} --other-file {shlex.quote(shown[other])} '
                f'-- "$BLETRANSFER_BIN" pair --timeout 60 2>&1')
    res = ctx.lab.run(a=command("a", answer_a, early_a), b=command("b", answer_b, early_b), deadline=150, step=label)
    return res.job("a").output(), res.job("b").output()


def shown_code(text: str) -> str:
    found = re.search(r"this host's code:\s+(\d{3} \d{3})", text)
    return found.group(1) if found else ""


@scenario("peers-pair", tags=("bletransfer", "secure", "peers"), conf="default")
def peers_pair(ctx: Context):
    """`bletransfer pair` between the two guests, with the default files only (no trust
    option anywhere), each on a pseudo-terminal: first b presses Enter at the question (nothing
    added on either side, both 77); then each types the code the other shows, having typed
    Enter and n ahead of the question, which must not be taken (each file lists the other under
    its name); then `send` → `receive` with no trust option is authenticated, and a bleak central
    (Apple's flow) gets nothing from `send`. Also: `pair` with standard input from a pipe asks
    nothing (64)."""
    fresh(ctx)
    key_a, key_b = default_keygen(ctx, "a", "a"), default_keygen(ctx, "b", "b")
    peers = {host: f"{KEY_DIR}/{ctx.name}/config-{host}/bletransfer/authorized-peers" for host in "ab"}

    # 0. No terminal, no question: a scripted yes is not an answer.
    piped = ctx.lab.sh("a", f'echo y | {default_home(ctx, "a")} "$BLETRANSFER_BIN" pair --timeout 5 2>&1; echo PAIR-EXIT $?',
                       step="pair from a pipe").stdout()
    ctx.check("PAIR-EXIT 64" in piped and "ssh -t" in piped, f"pair from a pipe: 64 and the ssh -t hint: {piped!r}")

    # 1. Declined on b (Enter alone at the question): nothing on either side.
    started = time.monotonic()
    a_out, b_out = pair_run(ctx, "other", "decline", "pair b declines")
    ctx.check("PAIR-EXIT 77" in a_out and "PAIR-EXIT 77" in b_out,
              f"both ended with 77 (declined): a said {a_out[-700:]!r}; b said {b_out[-700:]!r}")
    ctx.check("declined on the other host" in a_out and "declined on this host" in b_out,
              "each says where it was declined")
    code_a, code_b = shown_code(a_out), shown_code(b_out)
    ctx.check(code_a != "" and code_b != "", f"each showed a code of its own: {code_a!r} / {code_b!r}")
    for host in "ab":
        exists = ctx.lab.sh(host, f"test -e {peers[host]} && echo YES || echo NO", step=f"peers file on {host}").stdout()
        ctx.check("NO" in exists, f"no authorized-peers file on {host} after a declined pairing")
    ctx.figure("pair_declined_seconds", round(time.monotonic() - started, 1))

    # 2. Each types the other's code; what each typed ahead (Enter, n: a decline) is discarded.
    started = time.monotonic()
    a_out, b_out = pair_run(ctx, "other", "other", "pair both accept", early_a="\\n\\n", early_b="n\\ny\\n")
    ctx.figure("pair_seconds", round(time.monotonic() - started, 1))
    ctx.check("PAIR-EXIT 0" in a_out and "PAIR-EXIT 0" in b_out,
              f"both ended with 0 (the early Enter and n not taken): a said {a_out[-700:]!r}; b said {b_out[-700:]!r}")
    code_a, code_b = shown_code(a_out), shown_code(b_out)
    ctx.check(code_a != "" and code_b != "" and code_a != code_b, f"each showed its own code: {code_a!r} / {code_b!r}")
    ctx.check(key_b.fingerprint in a_out and key_a.fingerprint in b_out, "each showed the other's fingerprint")
    listed_a = ctx.lab.sh("a", f"cat {peers['a']}", step="a's peers file").stdout()
    listed_b = ctx.lab.sh("b", f"cat {peers['b']}", step="b's peers file").stdout()
    ctx.check(key_b.line in listed_a.splitlines(), f"a lists b's key line as lab-b: {listed_a!r}")
    ctx.check(key_a.line in listed_b.splitlines(), f"b lists a's key line as lab-a: {listed_b!r}")

    # 3. A transfer with the default files and no trust option: authenticated.
    payload = known_payload(2000, b"paired")
    msg = ctx.payload("message", payload)
    out = ctx.path("received")
    res = ctx.lab.run(
        a=f"{default_home(ctx, 'a')} {SEND} --file {shlex.quote(msg)} --timeout 90",
        b=f"{default_home(ctx, 'b')} {RECEIVE} --output {shlex.quote(out)} --timeout 90",
        b_after=("a", ADVERTISING), deadline=130, step="transfer with the default files")
    ctx.check(ctx.read(out) == payload, "b stored the message whole")
    received = json_events(res.job("b").output(), "received")
    sender = received[0].get("sender", {}) if received else {}
    ctx.check(sender.get("name") == "lab-a" and sender.get("authenticated") is True,
              f"the message is from lab-a, authenticated: {sender}")

    # 4. The same `send` toward an Apple-flow central (bleak on b): not one payload byte.
    record = ctx.path("central-values")
    central = ctx.central(None, extra=f"--record {shlex.quote(record)} --scan-timeout 40 --message-timeout 20") \
        + "; echo CENTRAL-EXIT $?"
    res = ctx.lab.run(a=f"{default_home(ctx, 'a')} {SEND} --file {shlex.quote(msg)} --timeout 45; echo SEND-EXIT $?",
                      b=central, b_after=("a", ADVERTISING), deadline=90, step="default files vs an Apple-flow central")
    got = ctx.read(record)
    found = windows_found(got, payload_windows(payload))
    ctx.check(found == 0 and "RECEIVED" not in res.job("b").stdout(),
              f"the Apple-flow central got {len(got)} bytes, {found} 16-byte windows of the payload")
    ctx.check("SEND-EXIT 75" in res.job("a").output() and json_events(res.job("a").output(), "delivered") == [],
              "send delivered nothing and timed out (75)")


@scenario("peers-outbox-folders", tags=("bletransfer", "daemon", "secure", "peers", "virtual", "extended"), conf="default")
def peers_outbox_folders(ctx: Context):
    """A keyed sender daemon on a whose authorized peers are b and a third host (lab-a-ghost):
    its outbox holds a file at the top, one in `lab-b/` and one in `lab-a-ghost/` (served
    first of the two folders). b's receiver daemon gets the top file and its own, the third
    host's file stays with a, and a's log names the refusal (b told nothing about it)."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    ghost = keygen(ctx, "a", "a-ghost")
    peers_a, peers_b = authorize(ctx, "a", "a", [key_b, ghost]), authorize(ctx, "b", "b", [key_a])
    anyone, for_b, for_ghost = os.urandom(2500), os.urandom(3500), os.urandom(4500)
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, [anyone])
    for folder, name, data in (("lab-a-ghost", "ghost.dat", for_ghost), ("lab-b", "for-b.dat", for_b)):
        (outbox / folder).mkdir()
        hidden = outbox / folder / f".{name}"
        hidden.write_bytes(data)
        hidden.rename(outbox / folder / name)
    sender = daemon_job("sender", host_outbox, "false", 150, "--settle-time 0", trust=trust(key_a, peers_a))
    # b runs on for 15 s after its second file, so that it visits a again and is refused the ghost's.
    receiver = daemon_job("receiver", host_inbox,
                          f'[ "$({count_files(host_inbox)})" -ge 2 ] && sleep 15 && true', 130,
                          trust=trust(key_b, peers_b))
    res = ctx.lab.run(a=sender, b=receiver, finish_with="b", deadline=180, step="outbox folders per peer")
    stored = {p.name: p.read_bytes() for p in regular_files(inbox)}
    ctx.check(stored == {"file001.dat": anyone, "for-b.dat": for_b},
              f"b stored the top file and its own, identical: {sorted(stored)}")
    ctx.check((outbox / "lab-a-ghost" / "ghost.dat").read_bytes() == for_ghost,
              "the third host's file stays in a's outbox/lab-a-ghost/")
    ctx.check((outbox / "lab-b" / "sent" / "for-b.dat").exists() and (outbox / "sent" / "file001.dat").exists(),
              "delivered files moved to sent/ of their folder")
    a_all = res.job("a").output()
    refusals = lines_naming(a_all, "for lab-a-ghost, not for lab-b")
    ctx.check(len(refusals) >= 1, "a's log says b was refused the message addressed to lab-a-ghost")
    ctx.figure("outbox_folder_refusals", len(refusals))


# renameat2(RENAME_EXCHANGE) from Python (ctypes: no module wraps it): exchanges two names in
# one directory atomically, as a member of the outbox's group can. `count` exchanges, or, with
# `--for SECONDS`, as many as it can make in that time rounded to an odd count (so a folder
# swapped before ends swapped back). Prints `EXCHANGES <n>`. Runs on a guest, on its tmpfs
# (9p refuses the flag).
RENAME_EXCHANGE = ("import ctypes, os, sys, time\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "top, first, second, mode, value = sys.argv[1:6]\n"
                   "fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)\n"
                   "def exchange():\n"
                   "    if libc.renameat2(fd, first.encode(), fd, second.encode(), 2) != 0:\n"
                   "        sys.exit('renameat2: ' + os.strerror(ctypes.get_errno()))\n"
                   "count = 0\n"
                   "if mode == '--count':\n"
                   "    for _ in range(int(value)):\n"
                   "        exchange(); count += 1\n"
                   "else:\n"
                   "    end = time.monotonic() + float(value)\n"
                   "    while time.monotonic() < end or count % 2 == 0:\n"
                   "        exchange(); count += 1\n"
                   "print('EXCHANGES', count)\n")


def exchange_names(lab, host: str, top: str, first: str, second: str, how: str, step: str):
    """Runs RENAME_EXCHANGE on `host` (how: '--count N' or '--for SECONDS'); returns the count."""
    job = lab.sh(host, f"python3 -c {shlex.quote(RENAME_EXCHANGE)} {shlex.quote(top)} {shlex.quote(first)} "
                       f"{shlex.quote(second)} {how}", step=step, deadline=120)
    found = re.search(r"^EXCHANGES (\d+)$", job.stdout(), re.M)
    scenarios.say(f"  {step}: {found.group(1) if found else '?'} exchange(s)")
    return int(found.group(1)) if found else 0


@scenario("peers-outbox-swap", tags=("bletransfer", "daemon", "secure", "peers", "virtual"), conf="default")
def peers_outbox_swap(ctx: Context):
    """M-2 of issue 48, against the running daemon: a keyed sender daemon on a serves
    `outbox/lab-b/` (one file for b). Once it advertises, `outbox/lab-b` is exchanged
    (renameat2 RENAME_EXCHANGE) with a symbolic link to the directory holding a's identity
    (0600, one link); b's receiver visits a meanwhile. Then the two are exchanged back and forth
    as fast as a can for 15 s, ending with the folder back in place, while b keeps visiting.
    b stores its own file and nothing else; nothing of the identity's directory is sent, moved
    (no sent/ or failed/ there) or written."""
    fresh(ctx)
    key_a, key_b = host_keys(ctx)
    peers_a, peers_b = authorize(ctx, "a", "a", [key_b]), authorize(ctx, "b", "b", [key_a])
    state = f"{KEY_DIR}/{ctx.name}"
    outbox = f"{state}/outbox"
    for_b = os.urandom(3000)
    staged = ctx.payload("for-b", for_b)
    ctx.lab.sh("a", f"rm -rf {outbox} && mkdir -p {outbox}/lab-b && cp {shlex.quote(staged)} {outbox}/lab-b/.for-b.dat && "
                    f"mv {outbox}/lab-b/.for-b.dat {outbox}/lab-b/for-b.dat && ln -s {state} {outbox}/.swap",
               step="a's outbox with lab-b/ and a link to the identity's directory")
    before = ctx.lab.sh("a", f"ls -A {state}", step="identity directory before").stdout().split()
    identity_b64 = ctx.lab.sh("a", f"base64 -w0 {key_a.identity}", step="a's identity").stdout().strip()
    _, inbox, _, host_inbox = prepare(ctx, [])

    def swap_once(lab) -> None:
        exchange_names(lab, "a", outbox, "lab-b", ".swap", "--count 1", "lab-b exchanged with the link")

    def race(lab) -> None:
        exchange_names(lab, "a", outbox, "lab-b", ".swap", "--for 15", "lab-b and the link exchanged back and forth")

    sender = daemon_job("sender", outbox, "false", 200, "--settle-time 0", trust=trust(key_a, peers_a))
    receiver = daemon_job("receiver", host_inbox, f'[ "$({count_files(host_inbox)})" -ge 1 ] && sleep 5 && true', 180,
                          trust=trust(key_b, peers_b))
    res = ctx.lab.run(a=sender, b=receiver, finish_with="b", deadline=220, step="outbox folder swapped for a link",
                      b_after=("a", r'"event":"advertising"', 2.0),
                      timeline=((("a", r'"event":"advertising"', 1.0), swap_once),
                                (("b", r'"event":"scanning"', 12.0), race)))
    stored = {p.name: p.read_bytes() for p in regular_files(inbox)}
    ctx.check(stored == {"for-b.dat": for_b}, f"b stored its own file and nothing else: {sorted(stored)}")
    import base64
    identity = base64.b64decode(identity_b64) if identity_b64 else b"\0"
    ctx.check(all(identity not in data for data in stored.values()), "no stored file holds a's identity")
    after = ctx.lab.sh("a", f"ls -A {state}", step="identity directory after").stdout().split()
    ctx.check(sorted(after) == sorted(before),
              f"nothing moved into or written in the identity's directory: {sorted(before)} -> {sorted(after)}")
    offered = [e.get("file") for e in json_events(res.job("a").output(), "offering")]
    ctx.check(set(offered) <= {"for-b.dat"}, f"a offered only b's file: {offered}")
    ctx.figure("outbox_swap_refusals", len(lines_naming(res.job("a").output(), "was replaced")))


@scenario("daemon-drop-latency", tags=("bletransfer", "daemon", "secure", "virtual"), conf="default")
def daemon_drop_latency(ctx: Context):
    """Keyed daemons, both idle (a's outbox empty, b scanning), the default settle time: a
    1 KiB file written elsewhere on a and moved into its outbox (the Maildir way) is offered at
    once. Three drops; the figure is the median from the move to the file in b's inbox. The first
    drop is also reported alone: it is b's first visit of a, with BlueZ's whole service
    discovery before the channel; later visits open a's channel again at once."""
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    # a's outbox on its own tmpfs, where inotify sees the move (the run folder is 9p).
    outbox = f"{KEY_DIR}/{ctx.name}/outbox"
    ctx.lab.sh("a", f"rm -rf {outbox} && mkdir -p {outbox}", step="a's outbox")
    _, inbox, _, host_inbox = prepare(ctx, [])
    drops = 3
    payloads = [os.urandom(1024) for _ in range(drops)]
    latencies: list = []

    # Timed on a itself, from the rename to the file showing in b's inbox (the run folder, which
    # a sees too): the host's own clock would add the lab's dispatch of the `mv` (a script over
    # 9p, the agent, a shell), which took 0.4-0.8 s under TCG and is nothing a user meets.
    timed_move = ("import os, sys, time\n"
                  "staged, moved, arrived = sys.argv[1:]\n"
                  "os.rename(staged, moved)\n"
                  "start = time.monotonic()\n"
                  "while not os.path.exists(arrived) and time.monotonic() - start < 30:\n"
                  "    time.sleep(0.02)\n"
                  "print('ARRIVED', round(time.monotonic() - start, 2) if os.path.exists(arrived) else 'never')\n")

    def drop_each(lab) -> None:
        for index, data in enumerate(payloads, 1):
            staged = ctx.payload(f"drop{index}", data)
            name = f"drop{index}.bin"
            lab.sh("a", f"cp {shlex.quote(staged)} {outbox}/.{name}", step=f"stage {name}")
            job = lab.sh("a", f"python3 -c {shlex.quote(timed_move)} {outbox}/.{name} {outbox}/{name} "
                              f"{shlex.quote(host_inbox + '/' + name)}", step=f"move {name} in", deadline=60)
            found = re.search(r"^ARRIVED ([0-9.]+)$", job.stdout(), re.M)
            latencies.append(float(found.group(1)) if found else None)
            scenarios.say(f"  {name}: in b's inbox after {latencies[-1]} s")
            time.sleep(3)   # idle again: the sender's session is over, b is scanning

    sender = daemon_job("sender", outbox, "false", 200, trust=trust(key_a, peers_a))
    receiver = daemon_job("receiver", host_inbox, f'[ "$({count_files(host_inbox)})" -ge {drops} ]', 180,
                          trust=trust(key_b, peers_b))
    ctx.lab.run(a=sender, b=receiver, finish_with="b", deadline=220, step="drops into an idle outbox",
                timeline=((("b", r'"event":"scanning"', 3.0), drop_each),))
    stored = {p.name: p.read_bytes() for p in regular_files(inbox)}
    ctx.check(stored == {f"drop{i}.bin": payloads[i - 1] for i in range(1, drops + 1)},
              f"{drops} files, identical: {sorted(stored)}")
    measured = sorted(x for x in latencies if x is not None)
    ctx.figure("drop_to_inbox_seconds", measured[len(measured) // 2] if measured else None)
    ctx.figure("drop_to_inbox_first_visit_seconds", latencies[0] if latencies else None)
    ctx.figure("drop_to_inbox_all", latencies)


@scenario("chaos-forty", tags=("bletransfer", "daemon", "secure", "faults", "virtual", "long"), conf="default")
def chaos_forty(ctx: Context):
    """Keyed daemons a → b, 40 files of 1 KiB–160 KiB; for about two and a half minutes,
    every 4–8 s, SIGKILL of a's sender daemon or b's receiver daemon (each restarted by its
    loop, as systemd would) or a power cycle of either adapter; then quiet. Every file in b's
    inbox exactly once and identical, no stray or partial file, a's outbox empty."""
    import random
    fresh(ctx)
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    rng = random.Random(40)
    payloads = [os.urandom(rng.randint(1024, 160 * 1024)) for _ in range(40)]
    n = len(payloads)
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, payloads)
    spool_b = f"{KEY_DIR}/{ctx.name}/spool-b"
    pending = f'[ -n "$(find {shlex.quote(host_outbox)} -maxdepth 1 -type f ! -name ".*")" ]'
    arrived = f'[ "$({count_files(host_inbox)})" -ge {n} ]'

    def supervised(role: str, directory: str, spool: str, trust_options: str, running_while: str) -> str:
        option = "--outbox" if role == "sender" else "--output-dir"
        return (f'starts=0; end=$((SECONDS + 540))\n'
                f'while [ $SECONDS -lt $end ] && {running_while}; do\n'
                f'  "$BLETRANSFER_BIN" daemon --role {role} --adapter hci0 {option} {shlex.quote(directory)} '
                f'--json {f"--spool-dir {spool}" if spool else "--settle-time 0"} {trust_options} &\n'
                f'  pid=$!; starts=$((starts + 1))\n'
                f'  while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null && {running_while}; do sleep 0.5; done\n'
                f'  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null\n'
                f'done\necho "STARTS {role} $starts"\n')

    sender = supervised("sender", host_outbox, "", trust(key_a, peers_a), pending)
    # b runs on until a's outbox is empty too: a file stored just before a kill may still be
    # offered again, and must be answered, not stored twice.
    receiver = supervised("receiver", host_inbox, spool_b, trust(key_b, peers_b), f"! ( {arrived} && ! {pending} )")
    faults: list = []

    def chaos(lab) -> None:
        started = time.monotonic()
        while time.monotonic() - started < 150:
            time.sleep(rng.uniform(4, 8))
            kind = rng.choice(["kill-sender", "kill-receiver", "power-a", "power-b"])
            if kind == "kill-sender":
                lab.sh("a", "pkill -KILL -f 'daemon --role sender' || true", step="SIGKILL sender", check=False)
            elif kind == "kill-receiver":
                lab.sh("b", "pkill -KILL -f 'daemon --role receiver' || true", step="SIGKILL receiver", check=False)
            else:
                host = kind[-1]
                lab.fault(host, "power-off")
                time.sleep(2)
                lab.fault(host, "power-on")
            faults.append(kind)
        scenarios.say(f"  chaos over after {len(faults)} faults: " + ", ".join(f"{k} ×{faults.count(k)}" for k in sorted(set(faults))))

    started = time.monotonic()
    res = ctx.lab.run(a=sender, b=receiver, deadline=600, step="forty files through kills and power cycles",
                      timeline=((("a", r'"event":"advertising"', 2.0), chaos),))
    stored = regular_files(inbox)
    names = sorted(p.name for p in stored)
    expected = [f"file{i:03d}.dat" for i in range(1, n + 1)]
    ctx.check(names == expected, f"each file once under its own name, nothing else: {len(names)} files, "
                                 f"extra {sorted(set(names) - set(expected))}, missing {sorted(set(expected) - set(names))}")
    identical = sum((inbox / f"file{i:03d}.dat").exists() and (inbox / f"file{i:03d}.dat").read_bytes() == data
                    for i, data in enumerate(payloads, 1))
    ctx.check(identical == n, f"{identical}/{n} files bit-identical")
    ctx.check(regular_files(outbox) == [], "a's outbox is empty (every file delivered and moved to sent/)")
    ctx.check(len(regular_files(outbox / "sent")) == n, "all 40 in a's sent/")
    ctx.figure("chaos40_faults", len(faults))
    ctx.figure("chaos40_seconds", round(time.monotonic() - started, 1))
    b_all, a_all = res.job("b").output(), res.job("a").output()
    ctx.figure("chaos40_sent_again_acknowledged", len(lines_naming(b_all, "not stored twice")))
    ctx.figure("chaos40_starts", re.findall(r"STARTS \w+ \d+", a_all + b_all))
