#!/usr/bin/env python3
"""What the lab's scenarios set up on the hosts and look at afterwards: outbox and inbox
folders in the run folder and their listings, command lines for `bletransfer daemon` and for
a process's peak memory, and keys (identities and authorized-peers files made on the guests).

Used by the scenarios_*.py modules; it imports only Context from scenarios.py.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import Context  # noqa: E402

# Guest-local (tmpfs): the private keys stay in the guest that made them.
KEY_DIR = "/tmp/bletransfer-lab-keys"


# =============================================================================================
# Outbox, inbox and their listings
# =============================================================================================
def prepare(ctx: Context, payloads: list) -> tuple:
    """Outbox (files with increasing modification times) and an empty inbox in the run folder."""
    base = ctx.lab.run_dir / "payloads" / ctx.name
    outbox, inbox = base / "outbox", base / "inbox"
    outbox.mkdir(parents=True, exist_ok=True)
    inbox.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(payloads, 1):
        hidden = outbox / f".file{i:03d}.dat"
        hidden.write_bytes(data)
        os.utime(hidden, (1_700_000_000 + i, 1_700_000_000 + i))
        hidden.rename(outbox / f"file{i:03d}.dat")
    return outbox, inbox, ctx.lab.host_path(outbox), ctx.lab.host_path(inbox)


def regular_files(directory: Path) -> list:
    """The files directly in `directory` (on this machine), sorted; none when it is missing."""
    return sorted(p for p in directory.iterdir() if p.is_file()) if directory.exists() else []


def count_files(directory: str, pattern: str = "*") -> str:
    """Shell printing how many visible regular files matching `pattern` (a glob) lie directly in
    `directory` (a path as the hosts see it), without forking (lab_count_files)."""
    return f'lab_count_files {shlex.quote(directory)} {shlex.quote(pattern)}'


# =============================================================================================
# Command lines
# =============================================================================================
def daemon_job(role: str, directory: str, until: str, deadline: int, extra: str = "",
               trust: str = "--insecure-any-peer", output_on_guest: bool = False) -> str:
    """Shell for one guest: start the daemon, wait until `until` (a shell test) holds, then
    SIGTERM it and exit with its status, printing DAEMON-EXIT. `trust` is the daemon's trust
    options: by default any peer (for scenarios that are not about trust; trust() gives
    --identity and --authorized-peers). `output_on_guest`: see `daemon_output`."""
    option = "--outbox" if role == "sender" else "--output-dir"
    redirect, replay = daemon_output(output_on_guest)
    return (f'"$BLETRANSFER_BIN" daemon --role {role} --adapter hci0 {option} {shlex.quote(directory)} --json {trust} {extra}'
            f'{redirect} &\n'
            f'pid=$!\nend=$((SECONDS + {deadline}))\n'
            f'while [ $SECONDS -lt $end ] && kill -0 $pid 2>/dev/null && ! {{ {until}; }}; do lab_pause 0.5; done\n'
            f'echo "DAEMON-DONE after $SECONDS s"\n'
            f'kill -TERM $pid; wait $pid; rc=$?\n{replay}echo "DAEMON-EXIT $rc"; exit $rc\n')


def daemon_output(on_guest: bool) -> tuple:
    """(redirection, replay) for a daemon's output. By default it goes where the job's does:
    files in the run folder, 9p under TCG, so that every line crosses to the host as it is
    written. A measured run (`on_guest`) writes to the guest's own tmpfs instead, as a daemon
    logs to a local journal, and replays it into the job's output once the daemon has exited:
    a 9p write per event line, several a message, would be timed with the message."""
    if not on_guest:
        return "", ""
    return (' > "/tmp/lab-daemon-$$.out" 2> "/tmp/lab-daemon-$$.err"',
            'cat "/tmp/lab-daemon-$$.out"; cat "/tmp/lab-daemon-$$.err" >&2; rm -f "/tmp/lab-daemon-$$".*\n')


def with_peak_rss(command: str) -> str:
    """`command` in the background, its peak resident set (VmHWM, which only grows) read from
    /proc while it runs and printed as `PEAK-RSS-KIB N` when it ends; its exit status kept."""
    return (f"{command} & pid=$!; peak=0; "
            "while kill -0 $pid 2>/dev/null; do "
            "v=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null); [ -n \"$v\" ] && peak=$v; sleep 0.2; done; "
            "wait $pid; rc=$?; echo \"PEAK-RSS-KIB $peak\"; exit $rc")


def peak_rss_mib(output: str) -> float:
    """The MiB of the last `PEAK-RSS-KIB N` line (with_peak_rss) in `output`; -1 without one."""
    values = [int(line.split()[1]) for line in output.splitlines() if line.startswith("PEAK-RSS-KIB ")]
    return round(values[-1] / 1024, 1) if values else -1.0


# =============================================================================================
# Keys
# =============================================================================================
@dataclass
class Key:
    """An identity made on a guest: the line the other side lists, and where its private key is."""
    line: str          # the public key line, "bletransfer-x25519 <base64> <name>"
    fingerprint: str   # "SHA256:…", as `bletransfer id` prints it
    identity: str      # the private key's path on its guest
    host: str


def keygen(ctx: Context, host: str, label: str) -> Key:
    """A new identity on `host` named lab-<label>; its public key line and fingerprint."""
    directory = f"{KEY_DIR}/{ctx.name}"
    path = f"{directory}/{label}.identity"
    job = ctx.lab.sh(host, f'mkdir -p {directory} && rm -f {path} && '
                           f'"$BLETRANSFER_BIN" keygen --identity {path} --name lab-{label} >/dev/null && '
                           f'"$BLETRANSFER_BIN" id --identity {path}', step=f"keygen {label}")
    lines = job.stdout().splitlines()
    line = next((s.strip() for s in lines if s.startswith("bletransfer-x25519 ")), "")
    fingerprint = next((s.strip() for s in lines if s.startswith("SHA256:")), "")
    ctx.check(line.endswith(f" lab-{label}") and fingerprint != "",
              f"keygen on {host} printed a key line and a fingerprint: {job.stdout()!r}")
    mode = ctx.lab.sh(host, f"stat -c %a {path}", step="identity mode").stdout().strip()
    ctx.check(mode == "600", f"{path} is mode 0600, not {mode}")
    return Key(line, fingerprint, path, host)


def authorize(ctx: Context, host: str, label: str, keys: list) -> str:
    """An authorized-peers file on `host` listing `keys`; returns its path there."""
    path = f"{KEY_DIR}/{ctx.name}/{label}.peers"
    text = "# authorized peers written by the lab\n" + "".join(k.line + "\n" for k in keys)
    # 0644 whatever the umask: bletransfer refuses a list that group or others can write.
    ctx.lab.sh(host, f"printf %s {shlex.quote(text)} > {path} && chmod 644 {path}", step=f"authorize {label}")
    return path


def trust(identity: Key, peers: str) -> str:
    """The trust options of a host holding `identity` and listing the peers in the file `peers`."""
    return f"--identity {identity.identity} --authorized-peers {peers}"


def host_keys(ctx: Context) -> tuple:
    """Fresh keys on a and b, named lab-a and lab-b: (key_a, key_b)."""
    return keygen(ctx, "a", "a"), keygen(ctx, "b", "b")


def mutual_keys(ctx: Context) -> tuple:
    """Fresh keys on a and b, each side's authorized-peers file listing the other's key:
    (key_a, key_b, peers_a, peers_b)."""
    key_a, key_b = host_keys(ctx)
    return key_a, key_b, authorize(ctx, "a", "a", [key_b]), authorize(ctx, "b", "b", [key_a])


def mutual_trust(ctx: Context) -> tuple:
    """Trust options for a and b holding each other's (fresh) keys: (trust_a, trust_b)."""
    key_a, key_b, peers_a, peers_b = mutual_keys(ctx)
    return trust(key_a, peers_a), trust(key_b, peers_b)
