#!/usr/bin/env python3
"""Lab scenarios for bletransfer hosts WITHOUT keys: the framed protocol is still encrypted.

    BLETRANSFER_BIN=/path/to/bletransfer python3 scripts/lab/scenarios_plain.py [NAME...] [--reuse]

Same runner and options as scenarios.py. Neither host has an identity or authorized peers: each
run makes a key of its own and lets in any peer's key, so the session is encrypted (Noise XX,
sealed records) but authenticates nobody; names, many messages per connection and resume work
as between keyed hosts, and each side says once that the peer's key was not authenticated.

  keyless-names    `send --file` on a, `receive --output-dir` on b: the file is stored under its
                   own name with its modification time; a name holding an escape sequence is
                   stored sanitized (`_` for ESC) and printed escaped; `--no-name` falls back to
                   a generated name.
  keyless-daemons  daemons without keys (--insecure-any-peer): twelve outbox files, among them a
                   300 kB one, arrive under their outbox names, bit-identical, exactly once, in a
                   few visits (one connection carries every file ready).
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402
from scenarios import Context, scenario  # noqa: E402
from lab_events import event_lines, json_events  # noqa: E402
from lab_fixtures import count_files, daemon_job, peak_rss_mib, prepare, regular_files, with_peak_rss  # noqa: E402

SEND = '"$BLETRANSFER_BIN" send --json'
RECEIVE = '"$BLETRANSFER_BIN" receive --json'
ADVERTISING = ("a", r'"event":"advertising"')


def named_payload(ctx: Context, name: str, data: bytes, mtime: int) -> str:
    """A file called exactly `name` (in a folder of its own) for a to send; its host path."""
    folder = ctx.lab.run_dir / "payloads" / f"{ctx.name}-files"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    ctx.lab.push_payloads()
    return ctx.lab.host_path(path)


def one_transfer(ctx: Context, source: str, inbox: str, step: str, send_extra: str = "") -> tuple:
    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(source)} --timeout 200 {send_extra}",
                      b=f"{RECEIVE} --output-dir {shlex.quote(inbox)} --timeout 200",
                      b_after=ADVERTISING, deadline=240, step=step, expect={"a": 0, "b": 0})
    return res.job("a").stdout(), res.job("b").stdout()


@scenario("keyless-names", tags=("bletransfer", "roles", "keyless", "extended"))
def plain_names(ctx: Context):
    """Hosts without keys: `send --file` → `receive --output-dir` keeps the file's name and mtime."""
    ctx.require_bletransfer()
    inbox_local = ctx.lab.run_dir / "payloads" / f"{ctx.name}-inbox"
    inbox_local.mkdir(parents=True, exist_ok=True)
    # A retry starts from an empty inbox: a file an earlier attempt stored would make this
    # one's copy arrive under a numbered name.
    for leftover in inbox_local.iterdir():
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    inbox = ctx.lab.host_path(inbox_local)

    data = os.urandom(50_000)
    source = named_payload(ctx, "holiday photo.jpg", data, 1_700_000_123)
    a_out, b_out = one_transfer(ctx, source, inbox, "named file, no keys")
    stored = inbox_local / "holiday photo.jpg"
    ctx.check(stored.exists() and stored.read_bytes() == data, "stored as 'holiday photo.jpg', bit-identical")
    ctx.check(int(stored.stat().st_mtime) == 1_700_000_123, f"its mtime kept: {stored.stat().st_mtime}")
    received = json_events(b_out, "received")
    ctx.check(len(received) == 1 and received[0].get("name") == "holiday photo.jpg",
              f"the received event names it: {[e.get('name') for e in received]}")
    formats = [e.get("message", {}).get("format") for e in received]
    ctx.check(formats == ["secure"], f"received encrypted, without keys: {formats}")
    sender_key = received[0].get("sender", {}) if received else {}
    ctx.check(sender_key.get("authenticated") is False and str(sender_key.get("fingerprint", "")).startswith("SHA256:"),
              f"the sender's run key is shown, not claimed as authenticated: {sender_key}")
    notices = [e.get("text", "") for e in json_events(b_out, "warning")]
    ctx.check(any("not authenticated" in n and "bletransfer id" in n for n in notices),
              f"b says once that the sender was not authenticated, and what to do: {notices}")
    ctx.check(len(json_events(a_out, "delivered")) == 1, "the sender counted one delivery")

    hostile = "\x1b[2Jpwned.txt"
    source = named_payload(ctx, hostile, b"hostile name", 1_700_000_000)
    _, b_out = one_transfer(ctx, source, inbox, "name with an escape sequence")
    ctx.check((inbox_local / "_[2Jpwned.txt").read_bytes() == b"hostile name",
              f"stored sanitized as '_[2Jpwned.txt': {sorted(p.name for p in inbox_local.iterdir())}")
    ctx.check("\x1b" not in b_out, "no raw ESC reached b's output")

    source = named_payload(ctx, "secret-name.txt", b"no name sent", 1_700_000_000)
    _, b_out = one_transfer(ctx, source, inbox, "--no-name", send_extra="--no-name")
    generated = [p.name for p in inbox_local.iterdir() if p.name.startswith("message-")]
    ctx.check(len(generated) == 1 and (inbox_local / generated[0]).read_bytes() == b"no name sent",
              f"--no-name: a generated name ({generated})")
    ctx.check(not (inbox_local / "secret-name.txt").exists() and "secret-name" not in b_out,
              "--no-name: the name never reached b")


@scenario("keyless-daemons", tags=("bletransfer", "daemon", "keyless"))
def plain_daemons(ctx: Context):
    """Daemons without keys: twelve outbox files arrive under their names in a few visits."""
    ctx.require_bletransfer()
    sizes = [5, 20, 21, 300_000, 500, 1000, 3, 4096, 10_000, 7, 8000, 1]
    payloads = [os.urandom(n) for n in sizes]
    n = len(payloads)
    outbox, inbox, host_outbox, host_inbox = prepare(ctx, payloads)
    sender = daemon_job("sender", host_outbox, f'[ "$({count_files(host_outbox)})" -eq 0 ]', 400, "--settle-time 0")
    receiver = daemon_job("receiver", host_inbox, f'[ "$({count_files(host_inbox)})" -ge {n} ]', 400)
    res = ctx.lab.run(a=sender, b=receiver, deadline=450, step="twelve files, no keys")
    a_out, b_out = res.job("a").stdout(), res.job("b").stdout()
    ctx.check("DAEMON-EXIT 0" in a_out and "DAEMON-EXIT 0" in b_out, "both daemons exited 0 on SIGTERM")
    stored = regular_files(inbox)
    ctx.check(sorted(p.name for p in stored) == [f"file{i:03d}.dat" for i in range(1, n + 1)],
              f"each file stored under its outbox name: {[p.name for p in stored]}")
    ctx.check(all((inbox / f"file{i:03d}.dat").read_bytes() == data for i, data in enumerate(payloads, 1)),
              "every file bit-identical")
    ctx.check(regular_files(outbox) == [] and len(regular_files(outbox / "sent")) == n,
              "outbox empty, sent/ holds every file")
    received = json_events(b_out, "received")
    digests = [e.get("message", {}).get("sha256") for e in received]
    ctx.check(len(received) == n and len(set(digests)) == n, f"{n} received events, each message once: {len(received)}")
    ctx.check(all(e.get("message", {}).get("format") == "secure" for e in received), "all encrypted")
    visits = len(event_lines(b_out, "connected"))
    ctx.figure("keyless_daemons_visits", visits)
    ctx.figure("keyless_daemons_seconds", round(res.seconds, 1))
    # One connection carries every file ready; a few more visits are allowed for files the
    # sender's outbox watcher saw late or a session the fairness rule ended.
    ctx.check(visits <= 3, f"{n} files in at most 3 visits, took {visits}")


if __name__ == "__main__":
    sys.exit(scenarios.main())


def source_and_inbox(ctx: Context, create_source: bool = True) -> tuple[Path, Path]:
    """This scenario's source and inbox folders under the payloads, emptied (the inbox is made
    by the caller, once the source is pushed or not)."""
    base = ctx.lab.run_dir / "payloads" / f"{ctx.name}-source"
    inbox_local = ctx.lab.run_dir / "payloads" / f"{ctx.name}-inbox"
    for folder in (base, inbox_local):
        if folder.exists():
            shutil.rmtree(folder)
    if create_source:
        base.mkdir(parents=True)
    return base, inbox_local


@scenario("files-tree", tags=("bletransfer", "roles", "keyless", "files"))
def files_tree(ctx: Context):
    """`send --file DIR --file FILE` → `receive --output-dir`: a tree (nested folders, an empty
    file, a symbolic link that is not followed) and a file beside it arrive in one session,
    laid out as sent with their mtimes; receive stops by itself once the sender's session ends."""
    ctx.require_bletransfer()
    base, inbox_local = source_and_inbox(ctx, create_source=False)
    files = {
        "docs/readme.txt": b"read me\n",
        "docs/notes/2024/plan.md": os.urandom(30_000),
        "docs/empty.txt": b"",
        "docs/caf\u00e9 menu.txt": "cr\u00e8me br\u00fbl\u00e9e\n".encode(),
        "single.bin": os.urandom(5_000),
    }
    for index, (name, data) in enumerate(files.items()):
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    (base / "docs" / "passwd-link").symlink_to("/etc/passwd")
    inbox_local.mkdir(parents=True)
    ctx.lab.push_payloads()
    docs, single = ctx.lab.host_path(base / "docs"), ctx.lab.host_path(base / "single.bin")
    inbox = ctx.lab.host_path(inbox_local)

    res = ctx.lab.run(a=f"{SEND} --file {shlex.quote(docs)} --file {shlex.quote(single)} --timeout 200",
                      b=f"{RECEIVE} --output-dir {shlex.quote(inbox)} --timeout 200",
                      b_after=ADVERTISING, deadline=240, step="a tree and a file", expect={"a": 0, "b": 0})
    for index, (name, data) in enumerate(files.items()):
        stored = inbox_local / name
        ctx.check(stored.is_file() and stored.read_bytes() == data, f"{name}: stored bit-identical")
        ctx.check(stored.is_file() and int(stored.stat().st_mtime) == 1_700_000_000 + index, f"{name}: its mtime kept")
    ctx.check(not (inbox_local / "docs" / "passwd-link").exists(), "the symbolic link was not followed or sent")
    a_all = res.job("a").output()
    ctx.check("symbolic link" in a_all, "send said it left the symbolic link out")
    b_out = res.job("b").stdout()
    received = json_events(b_out, "received")
    ctx.check(len(received) == len(files), f"{len(received)} received events for {len(files)} files")
    subscriptions = json_events(b_out, "subscribed")
    ctx.figure("files_tree_visits", len(subscriptions))
    ctx.check(len(json_events(res.job("a").stdout(), "delivered")) == len(files), "a counted every delivery")


@scenario("files-large", tags=("bletransfer", "roles", "keyless", "files"))
def files_large(ctx: Context):
    """`send --file` of a 256 KiB file → `receive --output-dir`: the sender reads it from disk as
    it goes, the receiver writes it into a partial file in the output directory and links it to
    its name once verified; stored identical, nothing partial left, both peak RSS printed (≤ 64
    MiB). Past the 256 KiB from which a received message goes to a partial file, not memory;
    files-200mib (long) shows the same at 200 MiB."""
    large_file(ctx, 256 * 1024 + 13, "files_large")


@scenario("files-200mib", tags=("bletransfer", "roles", "keyless", "files", "long"))
def files_200mib(ctx: Context):
    """As files-large with 200 MiB (over three times the 64 MiB a message held in memory may
    take): streamed both ways, both peak RSS ≤ 64 MiB. Tens of minutes under TCG."""
    large_file(ctx, 200 * 1024 * 1024, "files_200mib", timeout=5400)


def large_file(ctx: Context, size: int, figure: str, timeout: int = 300) -> None:
    ctx.require_bletransfer()
    base, inbox_local = source_and_inbox(ctx)
    inbox_local.mkdir(parents=True)
    data = os.urandom(size)
    (base / "large.bin").write_bytes(data)
    ctx.lab.push_payloads()
    source, inbox = ctx.lab.host_path(base / "large.bin"), ctx.lab.host_path(inbox_local)
    # The resume spool beside the inbox, on the host's disk: the guests' own file system is
    # their memory, and a checkpoint of a large message would fill it.
    spool = ctx.lab.host_path(base.parent / f"{ctx.name}-spool")
    res = ctx.lab.run(a=with_peak_rss(f"{SEND} --file {shlex.quote(source)} --timeout {timeout}"),
                      b=with_peak_rss(f"{RECEIVE} --output-dir {shlex.quote(inbox)} --spool-dir {shlex.quote(spool)} "
                                      f"--timeout {timeout}"),
                      b_after=ADVERTISING, deadline=timeout + 40, step=f"a {size} B file", expect={"a": 0, "b": 0})
    stored = inbox_local / "large.bin"
    ctx.check(stored.is_file() and stored.stat().st_size == size
              and hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(data).digest(),
              "stored under its name, bit-identical")
    left = sorted(p.name for p in inbox_local.iterdir())
    ctx.check(left == ["large.bin"], f"nothing partial left in the output directory: {left}")
    sender_mib, receiver_mib = peak_rss_mib(res.job("a").stdout()), peak_rss_mib(res.job("b").stdout())
    ctx.figure(f"{figure}_sender_peak_rss_mib", sender_mib)
    ctx.figure(f"{figure}_receiver_peak_rss_mib", receiver_mib)
    ctx.check(0 < sender_mib <= 64 and 0 < receiver_mib <= 64,
              f"peak RSS within 64 MiB: sender {sender_mib} MiB, receiver {receiver_mib} MiB")
    received = json_events(res.job("b").stdout(), "received")
    ctx.check(len(received) == 1 and received[0].get("message", {}).get("format") == "secure", "one encrypted message")
    ctx.figure(f"{figure}_seconds", round(res.seconds, 1))
    if received:
        seconds = received[0].get("message", {}).get("seconds") or 0
        if seconds:
            ctx.figure(f"{figure}_kib_per_second", round(size / 1024 / seconds, 1))
