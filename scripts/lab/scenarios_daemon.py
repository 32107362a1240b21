#!/usr/bin/env python3
"""Lab scenarios for `bletransfer daemon` (the unattended-operation issue's checks).

    BLETRANSFER_BIN=/path/to/bletransfer python3 scripts/lab/scenarios_daemon.py [NAME...] [--reuse]

Same runner and options as scenarios.py (this file registers its scenarios, then runs that
file's main()). Both daemons run as in production, one per guest on hci0; faults come from the
lab (power-off / power-on, restart-bluetoothd) while files are moving.

Both scenarios run keyed daemons (each lists the other's key: the secure mode, where one
connection carries every file ready); the other daemon scenarios use --insecure-any-peer.

  daemon-twenty-files  sender daemon on a with 20 files in its outbox, receiver daemon on b;
                       each adapter is power-cycled once and each bluetoothd restarted once,
                       each fault a second into one of four 150 kB files (so mid-transfer). All 20 arrive exactly once, bit-identical, nothing
                       partial, each under its outbox name, in outbox order,
                       the outbox ends empty, sent/ holds the 20.
  daemon-rss-100       100 small messages; the receiver's resident memory after 1, 10, 50 and
                       100 messages (from its "received" events) — it should stay flat.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402
from scenarios import Context, scenario  # noqa: E402
from lab_events import event_lines, json_events, progress_of, states  # noqa: E402
from lab_fixtures import count_files, daemon_job, mutual_trust, prepare, regular_files  # noqa: E402


def keyed_daemon_jobs(ctx: Context, payloads: list, deadline: int) -> tuple:
    """An outbox holding `payloads` and an inbox (prepare()), and the shell for daemons
    holding each other's keys (mutual_trust(): the secure mode, so one connection carries every
    file ready): a sender on a until its outbox is empty, a receiver on b until its inbox holds
    every payload, each for at most `deadline` s. Returns (outbox, inbox, sender, receiver)."""
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, payloads)
    trust_a, trust_b = mutual_trust(ctx)
    sender = daemon_job("sender", host_outbox, f'[ "$({count_files(host_outbox)})" -eq 0 ]', deadline, "--settle-time 0",
                        trust=trust_a)
    receiver = daemon_job("receiver", host_inbox, f'[ "$({count_files(host_inbox)})" -ge {len(payloads)} ]', deadline,
                          trust=trust_b)
    return outbox, inbox, sender, receiver


@scenario("daemon-twenty-files", tags=("bletransfer", "daemon", "faults", "extended"), conf="default")
def daemon_twenty_files(ctx: Context):
    """Keyed daemons: 20 outbox files a → b through a power cycle and a bluetoothd restart on each side."""
    ctx.require_bletransfer()
    sizes = [5, 20, 21, 150001, 500, 1000, 150002, 3, 4096, 10000, 7, 150003, 300, 1500, 8000, 150004, 1,
             250, 3000, 20000]
    payloads = [os.urandom(n) for n in sizes]
    payloads[0] = "Grüße ✓\n".encode()
    payloads[7] = b"EOM"
    outbox, inbox, sender, receiver = keyed_daemon_jobs(ctx, payloads, 540)
    n = len(payloads)
    # Each fault strikes a second into one of the four large files (~4 s each here), on the side
    # it names: mid-transfer, never while a central is still setting a link up (where the guest
    # kernel has a bug, see scripts/lab/README.md).
    res = ctx.lab.run(
        a=sender, b=receiver, deadline=600, step="twenty files",
        timeline=(
            (("a", progress_of(150001), 1.0), ("a", "power-off")),
            (("a", progress_of(150001), 6.5), ("a", "power-on")),
            (("b", progress_of(150002), 1.0), ("b", "power-off")),
            (("b", progress_of(150002), 6.5), ("b", "power-on")),
            (("a", progress_of(150003), 1.0), ("a", "restart-bluetoothd")),
            (("b", progress_of(150004), 1.0), ("b", "restart-bluetoothd")),
        ))
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    # Kept for a reader of a failure: each daemon's events, in the run folder.
    for host, out in (("a", a_out), ("b", b_out)):
        (ctx.lab.run_dir / f"{ctx.name}-{host}.out").write_text(out)
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, "both daemons exited 0 on SIGTERM")
    # Every fault reached the daemons (and they went on).
    for host, out in (("a", a_out), ("b", b_out)):
        seen = states(out)
        ctx.check(seen.count("poweredOn") >= 3,
                  f"host {host}: poweredOn at start, after the power cycle and after the restart: {seen}")
    stored = regular_files(inbox)
    hidden = [p.name for p in stored if p.name.startswith(".")]
    ctx.check(not hidden, f"no partial files in the inbox: {hidden}")
    # The secure mode keeps the outbox names (file001.dat …), so sorted names say nothing of
    # the order: the receiver's events do.
    got = [p.read_bytes() for p in stored]
    want = {hashlib.sha256(p).hexdigest() for p in payloads}
    got_digests = [hashlib.sha256(g).hexdigest() for g in got]
    ctx.check(len(got) == n, f"{n} files stored, got {len(got)}")
    ctx.check(sorted(got_digests) == sorted(want) and len(set(got_digests)) == n,
              "every file arrived exactly once, bit-identical")
    ctx.check(regular_files(outbox) == [], f"outbox empty: {[p.name for p in regular_files(outbox)]}")
    ctx.check(len(regular_files(outbox / "sent")) == n, f"sent/ holds {len(regular_files(outbox / 'sent'))} of {n}")
    ctx.check(sorted(p.name for p in stored) == [f"file{i:03d}.dat" for i in range(1, n + 1)]
              and all((inbox / f"file{i:03d}.dat").read_bytes() == data for i, data in enumerate(payloads, 1)),
              "each file stored under its outbox name")
    order = [e.get("name") for e in json_events(b_out, "received")]
    ctx.check(order == [f"file{i:03d}.dat" for i in range(1, n + 1)], f"files arrived in outbox order: {order}")
    ctx.figure("daemon_twenty_files_visits", len(event_lines(b_out, "connected")))
    ctx.figure("daemon_twenty_files_seconds", round(res.seconds, 1))
    ctx.figure("daemon_twenty_files_bytes", sum(sizes))


@scenario("daemon-rss-100", tags=("bletransfer", "daemon", "extended"), conf="default")
def daemon_rss_100(ctx: Context):
    """Keyed daemons: 100 small messages a → b; the receiver's RSS after 1, 10, 50, 100 messages."""
    ctx.require_bletransfer()
    payloads = [f"message {i:03d} ".encode() + os.urandom(40) for i in range(1, 101)]
    _, _, sender, receiver = keyed_daemon_jobs(ctx, payloads, 840)
    n = len(payloads)
    res = ctx.lab.run(a=sender, b=receiver, deadline=900, step="hundred messages")
    received = json_events(res.job("b").stdout(), "received")
    ctx.check(len(received) >= n, f"{n} messages received, got {len(received)}")
    rss = {e["count"]: e.get("rss") for e in received if "count" in e}
    for k in (1, 10, 50, 100):
        if rss.get(k):
            ctx.figure(f"receiver_rss_mib_after_{k}", round(rss[k] / 1048576, 1))
    ctx.figure("daemon_100_messages_seconds", round(res.seconds, 1))
    ctx.figure("daemon_100_messages_visits", len(event_lines(res.job("b").stdout(), "connected")))
    ctx.check(rss.get(100) is not None and rss.get(10) is not None and rss[100] <= rss[10] * 1.25,
              f"RSS flat from message 10 to 100: {rss.get(10)} → {rss.get(100)}")


if __name__ == "__main__":
    sys.exit(scenarios.main())
