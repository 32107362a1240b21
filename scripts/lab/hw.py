#!/usr/bin/env python3
"""Run the lab's scenarios between two real hosts with BLE adapters, reached over SSH.

    scripts/lab/hw.sh --a user@hostA --b user@hostB [--tag peers] [NAME...]

Each host needs: bluez (bluetoothd running under systemd), bluez-test-tools (l2test),
python3 with bleak + bless for the third-party peers (LAB_PYTHON, default python3), and
passwordless `sudo -n` for systemctl/btmgmt (or log in as root). hw.sh checks all of this on
both hosts first and, if anything is missing, lists it and exits 69 without running anything. Scenarios tagged `virtual`
(link cut, controller detach, D-Bus policy) need the virtual lab and are skipped.

The lab folder (scripts/lab) and the payloads are copied to a work folder on each host
(HW_REMOTE_DIR, default /tmp/bletransfer-lab); results are copied back into lab-out/hw-<id>.
Set BLETRANSFER_BIN to the binary's path on the remote hosts for bletransfer scenarios
(/usr/bin/bletransfer where the Debian package is installed), HW_SSH_OPTIONS to add ssh
options. A target may name a port: ssh://root@127.0.0.1:10022.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab as labmod  # noqa: E402
from lab import HOSTS, Job, Lab, LabError, say  # noqa: E402

# HW_SSH_OPTIONS adds options (an identity, a known-hosts file) without touching ~/.ssh.
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=10",
            *shlex.split(os.environ.get("HW_SSH_OPTIONS", ""))]


class HwLab(Lab):
    """Lab over SSH: same run()/fault()/diagnose() as the virtual lab."""

    def __init__(self, targets: dict, run_dir: Path, remote_dir: str):
        super().__init__(run_dir, run_dir, {})
        self.targets = targets
        self.remote_dir = remote_dir
        self.python = os.environ.get("LAB_PYTHON", "python3")
        self.procs: dict = {}

    def ssh(self, host: str, command: str, stdin=None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", *SSH_OPTS, self.targets[host], command], stdin=stdin, **kw)

    # What a host must offer before anything runs there. Each line the script prints is one
    # missing piece, said the way a person would fix it.
    PREFLIGHT = r"""
need_cmd() { command -v "$1" >/dev/null 2>&1 || echo "command '$1' is missing (package $2)"; }
need_cmd bluetoothctl bluez
need_cmd btmgmt bluez
need_cmd l2test bluez-test-tools
need_cmd systemctl systemd
need_cmd journalctl systemd
need_cmd tar tar
need_cmd timeout coreutils
need_cmd setsid util-linux
if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
    echo "user $(id -un) is not root and has no passwordless sudo (sudo -n) for systemctl and btmgmt"
fi
"$LAB_PYTHON" -c 'import bleak, bless' 2>/dev/null ||
    echo "$LAB_PYTHON cannot import bleak and bless (pip install bleak==3.1.0 bless==0.3.0)"
if [ -n "${BLETRANSFER_BIN:-}" ] && [ ! -x "$BLETRANSFER_BIN" ]; then
    echo "BLETRANSFER_BIN=$BLETRANSFER_BIN is not an executable here (install the package: dpkg -i bletransfer_*.deb)"
fi
if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
    systemctl is-enabled --quiet bluetooth 2>/dev/null || [ -e /lib/systemd/system/bluetooth.service ] ||
        echo "no bluetooth.service (package bluez)"
fi
ls /sys/class/bluetooth 2>/dev/null | grep -q "^${LAB_HCI:-hci0}$" ||
    echo "no Bluetooth controller ${LAB_HCI:-hci0} (set LAB_HCI to the one to use)"
"""

    def preflight(self) -> list:
        """Problems that keep the hosts from running the scenarios, as "host: problem" lines."""
        problems = []
        for h in HOSTS:
            env = {"LAB_PYTHON": self.python}
            for k in ("BLETRANSFER_BIN", "LAB_HCI"):
                if os.environ.get(k):
                    env[k] = os.environ[k]
            script = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + self.PREFLIGHT
            try:
                r = self.ssh(h, "bash -s", input=script, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                problems.append(f"{h} ({self.targets[h]}): no answer over ssh within 60 s")
                continue
            if r.returncode == 255:
                last = (r.stderr.strip().splitlines() or ["no message"])[-1]
                problems.append(f"{h} ({self.targets[h]}): ssh failed: {last} "
                                "(a key-based login without a password is needed: ssh -o BatchMode=yes)")
                continue
            problems += [f"{h} ({self.targets[h]}): {line}" for line in r.stdout.splitlines() if line.strip()]
        return problems

    def prepare(self) -> None:
        for h in HOSTS:
            (self.run_dir / "ctl" / h).mkdir(parents=True, exist_ok=True)
            (self.run_dir / h).mkdir(parents=True, exist_ok=True)
            rd = shlex.quote(self.remote_dir)
            tar = subprocess.Popen(["tar", "-C", str(labmod.LAB_DIR.parent), "-cf", "-", "lab/peers", "lab/hw_lib.sh",
                                    "lab/common_lib.sh"],
                                   stdout=subprocess.PIPE)
            r = self.ssh(h, f"mkdir -p {rd}/ctl {rd}/payloads {rd}/{h} && tar -C {rd} -xf -", stdin=tar.stdout)
            tar.wait()
            if r.returncode != 0:
                raise LabError(f"host {h} ({self.targets[h]}): cannot prepare {self.remote_dir} over ssh")
            info = self.ssh(h, "bluetoothctl show | head -1", capture_output=True, text=True)
            say(f"host {h} = {self.targets[h]}: {info.stdout.strip() or 'no adapter visible'}")

    # ---- files ---------------------------------------------------------------------------
    def host_path(self, local: Path) -> str:
        return f"{self.remote_dir}/{local.relative_to(self.run_dir)}"

    def push_payloads(self) -> None:
        for h in HOSTS:
            tar = subprocess.Popen(["tar", "-C", str(self.run_dir), "-cf", "-", "payloads"], stdout=subprocess.PIPE)
            self.ssh(h, f"tar -C {shlex.quote(self.remote_dir)} -xf -", stdin=tar.stdout)
            tar.wait()

    def pull_file(self, host_path: str) -> Path:
        rel = os.path.relpath(host_path, self.remote_dir)
        local = self.run_dir / rel
        for h in HOSTS:
            r = self.ssh(h, f"cat {shlex.quote(host_path)} 2>/dev/null", capture_output=True)
            if r.returncode == 0 and r.stdout:
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_bytes(r.stdout)
                break
        return local

    # ---- commands --------------------------------------------------------------------------
    def env_exports(self, host: str) -> str:
        env = {"LAB_HOST": host, "LAB_OUT": self.remote_dir, "LAB_DIR": f"{self.remote_dir}/lab",
               "LAB_PEERS": f"{self.remote_dir}/lab/peers", "LAB_PYTHON": self.python,
               "LAB_SCENARIO": self.scenario}
        for k in ("BLETRANSFER_BIN", "LAB_HCI"):
            if os.environ.get(k):
                env[k] = os.environ[k]
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())

    def start(self, host: str, command: str, step: str = "command", deadline: float = 60) -> Job:
        self._seq += 1
        # Only letters, digits and dashes, as in the virtual lab: Job finds <id>.out and <id>.rc
        # with Path.with_suffix, which a dot in the step ("watch org.bluez") would cut short.
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.scenario}-{step}").strip("-")[:70]
        job_id = f"{time.strftime('%H%M%S')}-{self._seq:03d}-{slug}"
        ctl = self.ctl_dir(host)
        rpid = f"{self.remote_dir}/ctl/{job_id}.pid"
        script = (f"{self.env_exports(host)}\necho $$ > {shlex.quote(rpid)}\n"
                  f". \"$LAB_DIR/hw_lib.sh\"\ncd \"$LAB_OUT\"\n{command}\n")
        (ctl / f"{job_id}.sh").write_text(script)
        base = ctl / job_id
        # A local wrapper records the exit status where Job.poll() looks for it.
        wrapper = (f"ssh {shlex.join(SSH_OPTS)} {shlex.quote(self.targets[host])} 'setsid bash -s' "
                   f"< {shlex.quote(str(base))}.sh > {shlex.quote(str(base))}.out 2> {shlex.quote(str(base))}.err; "
                   f"echo $? > {shlex.quote(str(base))}.rc.tmp; mv {shlex.quote(str(base))}.rc.tmp {shlex.quote(str(base))}.rc")
        self.procs[job_id] = subprocess.Popen(["bash", "-c", wrapper], start_new_session=True)
        return Job(self, host, job_id, step, command, deadline)

    def _kill(self, job: Job) -> None:
        rpid = shlex.quote(f"{self.remote_dir}/ctl/{job.id}.pid")
        self.ssh(job.host, f"p=$(cat {rpid}) && kill -TERM -- -$p 2>/dev/null; sleep 2; kill -KILL -- -$p 2>/dev/null; true",
                 capture_output=True)

    def set_capture(self, on: bool) -> None:
        """Real hosts keep their own records (journalctl; btmon run by hand)."""

    def host_logs(self, host: str, lines: int = 20) -> str:
        r = self.ssh(host, f"journalctl -u bluetooth -n {lines} --no-pager 2>/dev/null || sudo -n journalctl -u bluetooth -n {lines} --no-pager",
                     capture_output=True, text=True)
        return f"--- {host} bluetoothd journal (last {lines}) ---\n{r.stdout.strip() or '(unavailable)'}"

    def down(self, quiet: bool = False) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 15)
                except ProcessLookupError:
                    pass


def main() -> int:
    import scenarios as sc
    p = argparse.ArgumentParser(description="lab scenarios between two real hosts over SSH")
    p.add_argument("--a", required=True, help="ssh target of host a (user@host)")
    p.add_argument("--b", required=True, help="ssh target of host b")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--list", action="store_true")
    p.add_argument("names", nargs="*")
    args = p.parse_args()
    runnable = [s for s in sc.SCENARIOS if "virtual" not in s.tags]
    if args.list:
        for s in runnable:
            print(f"{s.name:28} [{','.join(s.tags)}] {s.doc}")
        return 0
    chosen = [s for s in runnable if (not args.names or s.name in args.names)
              and (not args.tag or set(args.tag) & set(s.tags))]
    run_dir = (labmod.OUT_ROOT / ("hw-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))).resolve()
    run_dir.mkdir(parents=True)
    lab = HwLab({"a": args.a, "b": args.b}, run_dir, os.environ.get("HW_REMOTE_DIR", "/tmp/bletransfer-lab"))
    labmod.guard_signals()
    t0 = time.monotonic()
    results = []
    problems = lab.preflight()
    if problems:
        print("hw.sh: the hosts are not ready; nothing was run:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 69
    say("both hosts have what the scenarios need (tools, privileges, Python peers, controller)")
    # The virtual lab switches bluetoothd to one ATT channel for these scenarios; on real hosts
    # that is the host's own setting, and without it EATT can reorder compat notifications.
    if any(s.conf == "channels1" for s in chosen):
        for h in HOSTS:
            r = lab.ssh(h, "grep -Eq '^[[:space:]]*Channels[[:space:]]*=[[:space:]]*1[[:space:]]*$' /etc/bluetooth/main.conf",
                        capture_output=True)
            if r.returncode != 0:
                say(f"warning: host {h} ({lab.targets[h]}) does not set [GATT] Channels = 1 in "
                    "/etc/bluetooth/main.conf: the peers-* scenarios expect it (EATT may reorder their notifications)")
    try:
        lab.prepare()
        for s in chosen:
            ctx = sc.Context(lab, s.name)
            lab.scenario = s.name
            say(f"scenario {s.name}: {s.doc}")
            st = time.monotonic()
            try:
                lab.ensure_ready(s.conf)
                s.fn(ctx)
                status, detail = "PASS", ""
            except (LabError, sc.ScenarioFailed) as e:
                status, detail = "FAIL", str(e)
            except sc.ScenarioSkipped as e:
                status, detail = "SKIP", str(e)
            results.append((s.name, status, round(time.monotonic() - st, 1)))
            say(f"{status} {s.name}")
            if detail:
                print(detail, file=sys.stderr)
    except LabError as e:
        print(str(e), file=sys.stderr)
        results.append(("prepare", "FAIL", 0))
    finally:
        lab.down()
    print(f"\n==== hardware suite ({time.monotonic() - t0:.0f}s), logs in {run_dir}")
    for name, status, secs in results:
        print(f"  {status:4} {name:28} {secs:7.1f}s")
    return 1 if any(st == "FAIL" for _, st, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
