#!/usr/bin/env python3
"""Host side of the two-host virtual BLE lab (stdlib only).

Two QEMU guests, `a` and `b`, each with its own Debian kernel, system D-Bus, bluetoothd and
controller. Guest a runs BlueZ's controller emulator (btvirt); guest b's controller reaches it
over a virtio console bridged between the two QEMUs. Both guests see the host's root read-only
over 9p and the run folder read-write at the same path, so a command works the same on the host
and in a guest, and everything a guest writes is on the host at once.

The host talks to each guest's agent over a virtio-serial port backed by a FIFO: it writes a
command script into <run>/ctl/<host>/<id>.sh and the line "<id>"; the agent runs it and writes
<id>.out, <id>.err and finally <id>.rc next to it.

Used as a module by scenarios.py (class Lab) and as the CLI behind lab.sh.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

sys.path.insert(0, str(Path(__file__).resolve().parent / "guest"))
import radio_model  # noqa: E402  (the radio's profiles, shared with the guests)

LAB_DIR = Path(os.environ.get("LAB_DIR") or Path(__file__).resolve().parent)
REPO = Path(os.environ.get("REPO") or LAB_DIR.parent.parent)
LAB_CACHE = Path(os.environ.get("LAB_CACHE") or REPO / ".lab-cache")
OUT_ROOT = Path(os.environ.get("LAB_OUT_ROOT") or REPO / "lab-out")
STATE_FILE = OUT_ROOT / "current.json"
HOSTS = ("a", "b")


def say(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(missing)"
    out = text.splitlines()[-lines:]
    return "\n".join(out) if out else "(empty)"


class LabError(Exception):
    """A step failed; the message already carries the diagnosis."""


# What a guest has of its own (tmpfs or its kernel's), hiding the host's folders there. The
# checkout and the run folder are shared with the guests explicitly, wherever they are; anything
# else a guest must read (a binary, a Python) must not be under these.
GUEST_PRIVATE = ("/tmp", "/run", "/var/tmp", "/var/lib/bluetooth", "/root/.cache", "/dev", "/proc",
                 "/sys")


def qemu_opt(path) -> str:
    """A path inside a QEMU -fsdev option (a comma is written twice)."""
    return str(path).replace(",", ",,")


def hidden_from_guests(path) -> Optional[str]:
    """The guest-private folder that hides `path` from the guests, or None when they see it."""
    def inside(p: str, d) -> bool:
        return p == str(d) or p.startswith(str(d).rstrip("/") + "/")
    shared = (REPO.resolve(), OUT_ROOT.resolve())
    # Both the path as written and where its symbolic links lead (a venv's python is a link out
    # of the venv, whose packages stay beside it).
    for p in (os.path.abspath(path), os.path.realpath(path)):
        if any(inside(p, s) for s in shared):
            continue
        for d in GUEST_PRIVATE:
            if inside(p, d):
                return d
    return None


def check_guest_paths() -> None:
    """Refuse, in one line, what the guests could not see or the kernel command line not carry."""
    for what, path in (("the checkout", REPO), ("the run folder (LAB_OUT_ROOT)", OUT_ROOT),
                       ("the lab scripts (LAB_DIR)", LAB_DIR)):
        if any(c.isspace() for c in str(Path(path).resolve())):
            raise LabError(f"{what} {Path(path).resolve()} has a space in its path, which the guests' "
                           "kernel command line cannot carry: clone into a path without spaces")
    if hidden_from_guests(LAB_DIR):
        raise LabError(f"LAB_DIR={LAB_DIR} is outside the checkout {REPO.resolve()}, under "
                       f"{hidden_from_guests(LAB_DIR)}, which the guests do not see")
    candidates = [("BLETRANSFER_BIN", os.environ.get("BLETRANSFER_BIN")),
                  ("LAB_BLUETOOTHD_CONF", os.environ.get("LAB_BLUETOOTHD_CONF"))]
    python_path = LAB_CACHE / "python.path"
    if python_path.exists():
        candidates.append(("the peers' Python (LAB_CACHE)", python_path.read_text().strip()))
    for what, path in candidates:
        if path and hidden_from_guests(path):
            raise LabError(f"{what}={path} is under {hidden_from_guests(path)}, which the guests have "
                           "of their own: put it inside the checkout or outside that folder")


def check_initramfs(initrd: Path) -> None:
    """Refuse a cached initramfs built from another guest/init (run lab.sh setup)."""
    stamp = Path(str(initrd) + ".stamp")
    try:
        digest = hashlib.md5((LAB_DIR / "guest" / "init").read_bytes()
                             + Path("/bin/busybox").read_bytes()).hexdigest()[:12]
        current = stamp.read_text().startswith(digest + "-")
    except OSError:
        current = False
    if not current:
        raise LabError(f"the initramfs in {LAB_CACHE} was built from another guest/init "
                       "(run: scripts/lab/lab.sh setup)")


@dataclass
class Job:
    """One command running on one guest."""
    lab: "Lab"
    host: str
    id: str
    step: str
    command: str
    deadline: float
    started: float = field(default_factory=time.monotonic)
    rc: Optional[int] = None
    timed_out: bool = False
    killed_at: Optional[float] = None
    stopped: bool = False  # stopped on purpose (run(finish_with=...)): exit status not judged

    @property
    def base(self) -> Path:
        return self.lab.ctl_dir(self.host) / self.id

    def stdout(self) -> str:
        try:
            return (self.base.with_suffix(".out")).read_text("utf-8", "replace")
        except OSError:
            return ""

    def stderr(self) -> str:
        try:
            return (self.base.with_suffix(".err")).read_text("utf-8", "replace")
        except OSError:
            return ""

    def output(self) -> str:
        return self.stdout() + self.stderr()

    def poll(self) -> Optional[int]:
        """Exit status once finished; enforces the deadline (kills the command's session)."""
        if self.rc is not None:
            return self.rc
        rcfile = self.base.with_suffix(".rc")
        if rcfile.exists():
            try:
                self.rc = int(rcfile.read_text().strip() or "255")
            except ValueError:
                self.rc = 255
            return self.rc
        now = time.monotonic()
        if self.killed_at is None and now - self.started > self.deadline:
            self.timed_out = True
            self.killed_at = now
            self.lab._kill(self)
        elif self.killed_at is not None and now - self.killed_at > 15:
            self.rc = 124  # the guest did not even report the kill: treat as hung
        return self.rc

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.05)
        return self.rc  # type: ignore[return-value]

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.deadline:g}s"
        return f"exit status {self.rc}"


# A trigger is a number of seconds since the run started, or (host, regex[, delay]): fires
# `delay` seconds after the host's command printed a matching line (stdout or stderr).
Trigger = Union[float, int, tuple]
# An action is (target, fault) as for Lab.fault, or a callable taking the Lab.
Action = Union[tuple, Callable[["Lab"], None]]


@dataclass
class RunResult:
    a: Optional[Job]
    b: Optional[Job]
    seconds: float
    faults: list

    def job(self, host: str) -> Job:
        j = getattr(self, host)
        assert j is not None
        return j


class Lab:
    """A booted lab (or one to boot). Attribute `run_dir` is shared with the guests."""

    def __init__(self, run_dir: Path, sock_dir: Path, pids: dict, boot_seconds: float = 0.0,
                 no_controller: tuple = ()):
        self.run_dir = run_dir
        self.sock_dir = sock_dir
        self.pids = pids
        self.boot_seconds = boot_seconds
        self.no_controller = tuple(no_controller)
        self._seq = 0
        self.scenario = "manual"
        # The radio's profile (guest/radio_model.py), passed to the guests as LAB_LINK.
        self.link = os.environ.get("LAB_LINK") or radio_model.DEFAULT_PROFILE
        python_path = LAB_CACHE / "python.path"
        self.python = python_path.read_text().strip() if python_path.exists() else "python3"

    # ---- state ---------------------------------------------------------------------------
    def save(self) -> None:
        OUT_ROOT.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps({
            "run_dir": str(self.run_dir), "sock_dir": str(self.sock_dir), "pids": self.pids,
            "boot_seconds": self.boot_seconds, "no_controller": list(self.no_controller),
            "link": self.link}))
        latest = OUT_ROOT / "latest"
        try:
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(self.run_dir.name)
        except OSError:
            pass

    @classmethod
    def current(cls) -> "Lab":
        if not STATE_FILE.exists():
            raise LabError("the lab is not up (run: lab.sh up)")
        s = json.loads(STATE_FILE.read_text())
        lab = cls(Path(s["run_dir"]), Path(s["sock_dir"]), s["pids"], s.get("boot_seconds", 0.0),
                  tuple(s.get("no_controller", ())))
        lab.link = os.environ.get("LAB_LINK") or s.get("link", lab.link)
        for h, pid in lab.pids.items():
            if not lab._is_our_qemu(pid):
                raise LabError(f"guest {h} is not running any more (run: lab.sh down; lab.sh up)")
        return lab

    def _is_our_qemu(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            return False
        return "qemu-system" in cmdline and str(self.sock_dir) in cmdline

    # ---- boot ----------------------------------------------------------------------------
    @classmethod
    def up(cls, no_controller: tuple = (), mem_mb: Optional[int] = None,
           run_id: Optional[str] = None) -> "Lab":
        stop_stale()
        kver = (LAB_CACHE / "kernel.version").read_text().strip()
        kernel = LAB_CACHE / "kernel" / "boot" / f"vmlinuz-{kver}"
        initrd = LAB_CACHE / "initramfs.cpio.gz"
        if not kernel.exists() or not initrd.exists():
            raise LabError(f"no guest kernel/initramfs in {LAB_CACHE} (run: lab.sh setup)")
        check_initramfs(initrd)
        check_guest_paths()
        run_id = run_id or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = (OUT_ROOT / run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        for h in HOSTS:
            (run_dir / h).mkdir(exist_ok=True)
            (run_dir / "ctl" / h).mkdir(parents=True, exist_ok=True)
        # Unix socket paths are limited to 108 bytes: keep QEMU's sockets in a short host-only
        # folder (guests never look there).
        sock_dir = Path(tempfile.mkdtemp(prefix="blelab-", dir="/tmp"))
        mem = str(mem_mb or int(os.environ.get("LAB_MEM_MB", "768")))
        lab = cls(run_dir, sock_dir, {}, no_controller=no_controller)
        t0 = time.monotonic()
        say(f"booting guests a and b (TCG, {mem} MiB each), output in {run_dir}")
        try:
            for h in HOSTS:
                for end in ("in", "out"):
                    os.mkfifo(sock_dir / f"{h}.ctl.{end}")
                cmd = lab._qemu_command(h, kernel, initrd, mem)
                (run_dir / h / "qemu.cmd").write_text(shlex.join(cmd) + "\n")
                log = open(run_dir / h / "qemu.log", "wb")
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
                lab.pids[h] = p.pid
                if h == "a":  # b's chardev connects to a's socket
                    _wait_for(lambda: (sock_dir / "peer.sock").exists() or p.poll() is not None, 20)
            lab.save()
            for h in HOSTS:
                ok = _wait_for(lambda: (run_dir / h / "agent.ready").exists()
                               or not lab._is_our_qemu(lab.pids[h]), 240)
                if not ok or not (run_dir / h / "agent.ready").exists():
                    raise LabError(f"guest {h} did not come up\n--- {h} console ---\n"
                                   f"{tail(run_dir / h / 'console.log', 30)}\n--- {h} qemu ---\n"
                                   f"{tail(run_dir / h / 'qemu.log', 10)}\n--- {h} agent ---\n"
                                   f"{tail(run_dir / h / 'agent.log', 20)}")
            agents = time.monotonic() - t0
            say(f"agents up after {agents:.1f}s; attaching controllers")
            if os.environ.get("LAB_BTMON") == "1":
                lab.set_capture(True)
            if "a" not in no_controller:
                lab.sh("a", "lab_controller_attach", step="attach controller", deadline=60)
            else:
                lab.sh("a", "lab_emulator_start", step="start emulator", deadline=60)
            lab.sh("a", "lab_link_up", step="bridge b's controller", deadline=30)
            if "b" not in no_controller:
                lab.sh("b", "lab_controller_attach", step="attach controller", deadline=60)
            for h in HOSTS:
                if h not in no_controller:
                    lab.sh(h, "lab_wait 60 lab_hci_up || { lab_power on; }", step="power on", deadline=90)
            lab.boot_seconds = round(time.monotonic() - t0, 1)
            lab.save()
            addrs = {h: lab.sh(h, "lab_address", step="address").stdout().strip()
                     for h in HOSTS if h not in no_controller}
            say(f"lab up in {lab.boot_seconds}s (agents {agents:.1f}s); adapters: "
                + ", ".join(f"{h}={a}" for h, a in addrs.items()))
            (run_dir / "boot.json").write_text(json.dumps(
                {"boot_seconds": lab.boot_seconds, "agents_seconds": round(agents, 1), "addresses": addrs}))
            return lab
        except BaseException:
            if os.environ.get("LAB_KEEP_ON_FAIL") == "1":
                say("LAB_KEEP_ON_FAIL=1: leaving the guests up for inspection (lab.sh down)")
            else:
                lab.down(quiet=True)
            raise

    def _qemu_command(self, h: str, kernel: Path, initrd: Path, mem: str) -> list:
        rd = self.run_dir
        append = (f"console=ttyS0 quiet loglevel=3 panic=-1 lab.host={h} lab.out={rd} "
                  f"lab.dir={LAB_DIR} lab.repo={REPO.resolve()} "
                  f"lab.rootcache={os.environ.get('LAB_ROOT_CACHE', 'mmap')}")
        cmd = [shutil.which("qemu-system-x86_64") or "qemu-system-x86_64",
               "-name", f"blelab-{h}", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", mem,
               "-machine", "pc", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
               "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
               "-serial", f"file:{rd / h / 'console.log'}",
               "-fsdev", "local,id=hostroot,path=/,readonly=on,security_model=none,multidevs=remap",
               "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
               # The checkout and the run folder, mounted at the same paths in the guest over its
               # own /tmp, /var/tmp...: the lab runs from a clone anywhere.
               "-fsdev", f"local,id=labrepo,path={qemu_opt(REPO.resolve())},readonly=on,"
                         "security_model=none,multidevs=remap",
               "-device", "virtio-9p-pci,fsdev=labrepo,mount_tag=labrepo",
               "-fsdev", f"local,id=labout,path={qemu_opt(rd)},security_model=none",
               "-device", "virtio-9p-pci,fsdev=labout,mount_tag=labout",
               "-device", "virtio-serial-pci,id=vser0",
               "-chardev", f"pipe,id=ctl,path={self.sock_dir / (h + '.ctl')}",
               "-device", "virtserialport,bus=vser0.0,chardev=ctl,name=lab.ctl",
               "-monitor", f"unix:{self.sock_dir / (h + '.monitor')},server=on,wait=off"]
        peer = self.sock_dir / "peer.sock"
        if h == "a":
            cmd += ["-chardev", f"socket,id=peer,path={peer},server=on,wait=off",
                    "-device", "virtserialport,bus=vser0.0,chardev=peer,name=lab.peer"]
        else:
            cmd += ["-chardev", f"socket,id=peer,path={peer},reconnect=1",
                    "-device", "virtconsole,bus=vser0.0,chardev=peer,name=lab.peer"]
        return cmd

    # ---- files shared with the hosts (the guests see run_dir at the same path) ---------------
    def host_path(self, local: Path) -> str:
        return str(local)

    def push_payloads(self) -> None:
        pass

    def pull_file(self, host_path: str) -> Path:
        return Path(host_path)

    # ---- shutdown ------------------------------------------------------------------------
    def down(self, quiet: bool = False) -> None:
        for h, pid in self.pids.items():
            if self._is_our_qemu(pid):
                try:
                    self._send(h, "shutdown")
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for h, pid in self.pids.items():
            while self._is_our_qemu(pid) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.1)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self._is_our_qemu(pid):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                    _wait_for(lambda: (_reap(pid), not self._is_our_qemu(pid))[1], 5)
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        try:
            if STATE_FILE.exists() and json.loads(STATE_FILE.read_text()).get("sock_dir") == str(self.sock_dir):
                STATE_FILE.unlink()
        except (OSError, ValueError):
            pass
        if not quiet:
            say(f"lab down (logs kept in {self.run_dir})")

    # ---- commands ------------------------------------------------------------------------
    def ctl_dir(self, host: str) -> Path:
        return self.run_dir / "ctl" / host

    def _send(self, host: str, line: str) -> None:
        # The FIFO is held open by QEMU; O_NONBLOCK makes a dead QEMU an error, not a hang.
        fd = os.open(self.sock_dir / f"{host}.ctl.in", os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def env_exports(self, host: str) -> str:
        env = {"LAB_HOST": host, "LAB_OUT": str(self.run_dir), "LAB_DIR": str(LAB_DIR),
               "LAB_PEERS": str(LAB_DIR / "peers"), "LAB_PYTHON": self.python, "REPO": str(REPO),
               "LAB_SCENARIO": self.scenario, "LAB_NO_CONTROLLER": " ".join(self.no_controller),
               "LAB_LINK": self.link}
        for k in ("BLETRANSFER_BIN", "LAB_BLUETOOTHD_CONF"):
            if os.environ.get(k):
                env[k] = os.environ[k]
        binary = os.environ.get("BLETRANSFER_BIN")
        if binary and os.path.isfile(binary):
            # Names the build, so that each guest copies it into its memory once (guest/lib.sh).
            st = os.stat(binary)
            env["LAB_BIN_KEY"] = f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())

    def start(self, host: str, command: str, step: str = "command", deadline: float = 60) -> Job:
        """Start a command (bash) on a guest; returns at once."""
        if host not in HOSTS:
            raise LabError(f"unknown host {host!r} (hosts: a, b)")
        self._seq += 1
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.scenario}-{step}").strip("-")[:60]
        # Unique across the CLI processes that share one lab (lab.sh run + lab.sh fault).
        job_id = f"{time.strftime('%H%M%S')}-{os.getpid()}-{self._seq:03d}-{slug}"
        ctl = self.ctl_dir(host)
        script = (f"#!/bin/bash\necho $$ > {shlex.quote(str(ctl / job_id))}.pid\n"
                  f"{self.env_exports(host)}\n. \"$LAB_DIR/guest/lib.sh\"\ncd \"$LAB_OUT\"\n"
                  f"{command}\n")
        (ctl / f"{job_id}.sh").write_text(script)
        job = Job(self, host, job_id, step, command, deadline)
        self._send(host, job_id)
        return job

    def _kill(self, job: Job) -> None:
        pidfile = job.base.with_suffix(".pid")
        self._seq += 1
        kill_id = f"kill-{os.getpid()}-{self._seq:03d}-{job.id}"[:100]
        (self.ctl_dir(job.host) / f"{kill_id}.sh").write_text(
            f"#!/bin/bash\np=$(cat {shlex.quote(str(pidfile))} 2>/dev/null) || exit 0\n"
            "kill -TERM -- -$p 2>/dev/null; for i in $(seq 30); do kill -0 -- -$p 2>/dev/null || exit 0; sleep 0.1; done\n"
            "kill -KILL -- -$p 2>/dev/null; exit 0\n")
        try:
            self._send(job.host, kill_id)
        except OSError:
            pass

    def sh(self, host: str, command: str, step: Optional[str] = None, deadline: float = 60,
           check: bool = True) -> Job:
        """Run a command on a guest and wait; raises LabError with a diagnosis on failure."""
        job = self.start(host, command, step or command.split("\n")[0][:40], deadline)
        job.wait()
        if check and not job.ok():
            raise LabError(self.diagnose(job))
        return job

    # ---- faults --------------------------------------------------------------------------
    FAULTS = {
        "power-off": "lab_power off",
        "power-on": "lab_power on",
        "restart-bluetoothd": "lab_restart_bluetoothd",
        "stop-bluetoothd": "lab_stop_bluetoothd",
        "start-bluetoothd": "lab_start_bluetoothd",
        "detach-controller": "lab_controller_detach",
        "attach-controller": "lab_controller_attach && lab_wait 30 lab_hci_up",
    }
    LINK_FAULTS = ("cut", "restore")

    def fault_job(self, target: str, fault: str) -> Job:
        """Start a fault; returns the running job (see fault() for the names)."""
        if target == "link" or fault in ("cut-link", "restore-link"):
            fault = fault.replace("-link", "")
            if fault == "cut":
                return self.start("a", "lab_link_down", step="fault cut-link", deadline=30)
            if fault == "restore":
                return self.start("a", "lab_link_restore", step="fault restore-link", deadline=90)
            raise LabError(f"unknown link fault {fault!r} (cut, restore)")
        if fault not in self.FAULTS:
            raise LabError(f"unknown fault {fault!r}; known: {', '.join(self.FAULTS)}, cut-link, restore-link")
        return self.start(target, self.FAULTS[fault], step=f"fault {fault}", deadline=90)

    def fault(self, target: str, fault: str) -> Job:
        """power-off | power-on | restart-bluetoothd | stop-bluetoothd | start-bluetoothd |
        detach-controller | attach-controller on host a|b, or cut | restore on target 'link'."""
        job = self.fault_job(target, fault)
        job.wait()
        if not job.ok():
            raise LabError(self.diagnose(job))
        return job

    def ensure_ready(self, conf: str = "default") -> None:
        """Bring both hosts back to the baseline: bluetoothd running with configuration `conf`
        ("default" or "channels1"), link up, adapters present and powered."""
        jobs = [self.start(h, f"lab_baseline {conf}", step="baseline", deadline=120) for h in HOSTS]
        for j in jobs:
            j.wait()
            if not j.ok():
                raise LabError(self.diagnose(j))

    def restart_air(self, conf: str = "default") -> None:
        """The emulated radio from scratch before a retry: both bluetoothds, both controllers,
        the emulator and the radio, brought up again in boot order (a's emulator and radio
        before b's controller, whose kernel gives up on a silent one after 2 s). A link stuck in
        the emulator (seen once: after a bluetoothd restart under a connecting peer, every later
        connection hung) would otherwise fail the retry the same way."""
        self.sh("b", "lab_kill bluetoothd; lab_kill btattach", step="radio down (b)", deadline=60)
        self.sh("a", "for n in bluetoothd btattach radio btvirt; do lab_kill $n; done",
                step="radio down (a)", deadline=60)
        for h in HOSTS:
            self.sh(h, f"lab_baseline {conf}", step="radio up", deadline=120)

    def use_link(self, profile: str) -> None:
        """Switch the radio to `profile` (radio_model.PROFILES) and power-cycle both adapters, so
        that each host reads its controller's buffers and features anew; links made from now on
        follow the profile."""
        if profile not in radio_model.PROFILES:
            raise LabError(f"unknown link profile {profile!r} (lab.sh links lists them)")
        if profile == self.link:
            return
        self.sh("a", f"lab_link_profile {shlex.quote(profile)}", step=f"link {profile}", deadline=30)
        self.link = profile
        self.save()
        for h in HOSTS:
            if h not in self.no_controller:
                self.sh(h, "lab_power off; lab_power on", step="power-cycle for the new link", deadline=90)

    def ensure_link(self, profile: str) -> None:
        """The radio on `profile`, whatever the state file says (a lab booted with another)."""
        actual = self.link_status().get("profile")
        if actual != profile:
            self.link = actual or self.link
            self.use_link(profile)

    def link_status(self) -> dict:
        """What the radio says of its links now (profile, PHY, interval, data length, losses)."""
        return json.loads(self.sh("a", "lab_link_status", step="link status", deadline=30).stdout())

    def set_capture(self, on: bool) -> None:
        """btmon on both guests (a/btmon.log, a/btmon.snoop, b/…) on or off. Off unless asked
        for (LAB_BTMON=1, or a failed scenario's retry): its live decoding costs each guest a
        third of its one CPU, and every figure with it."""
        for h in HOSTS:
            self.sh(h, "lab_start_btmon" if on else "lab_kill btmon", step="btmon " + ("on" if on else "off"),
                    deadline=30)

    # ---- two-host runs -------------------------------------------------------------------
    def run(self, a: Optional[str] = None, b: Optional[str] = None, deadline: float = 120,
            b_after: Optional[Trigger] = None, a_after: Optional[Trigger] = None,
            timeline: tuple = (), expect: Optional[dict] = None, step: str = "run",
            finish_with: Optional[str] = None) -> RunResult:
        """Run `a` on host a and `b` on host b concurrently, each within `deadline` seconds.

        b_after / a_after delay one side until a trigger: seconds, or (host, regex) matched
        against that host's output so far (e.g. ("a", r"^READY")). `timeline` is a list of
        (trigger, action) pairs fired once each during the run; an action is (target, fault)
        or a callable taking the Lab. `expect` maps host -> expected exit status (default 0).
        finish_with="b" stops a's command once b's is done (for peers that serve forever); an expected
        status of None takes any.
        Raises LabError with host, step and log tails when anything fails.
        """
        expect = {"a": 0, "b": 0, **(expect or {})}
        t0 = time.monotonic()
        cmds = {"a": a, "b": b}
        after = {"a": a_after, "b": b_after}
        jobs: dict = {"a": None, "b": None}
        pending = list(timeline)
        fault_jobs: list = []

        seen: dict = {}  # trigger -> when its pattern first matched

        def fired(trig: Trigger) -> bool:
            if trig is None:
                return True
            now = time.monotonic()
            if isinstance(trig, (int, float)):
                return now - t0 >= trig
            host, rx, delay = (tuple(trig) + (0.0,))[:3]
            if trig not in seen:
                j = jobs.get(host)
                if j is None or re.search(rx, j.output(), re.M) is None:
                    return False
                seen[trig] = now
            return now - seen[trig] >= delay

        failure = None
        while True:
            for h in HOSTS:
                if cmds[h] is not None and jobs[h] is None and fired(after[h]):
                    jobs[h] = self.start(h, cmds[h], step=f"{step}:{h}", deadline=deadline)
            for entry in list(pending):
                trig, action = entry
                if fired(trig):
                    pending.remove(entry)
                    if callable(action):
                        action(self)
                    else:
                        fj = self.fault_job(*action)
                        fault_jobs.append(fj)
                        say(f"  fault {action[0]} {action[1]} at {time.monotonic() - t0:.1f}s")
            for fj in fault_jobs:
                if fj.poll() is not None and not fj.ok() and failure is None:
                    failure = fj
            if finish_with and jobs[finish_with] is not None and jobs[finish_with].poll() is not None:
                for o in HOSTS:
                    j = jobs[o]
                    if o != finish_with and j is not None and j.poll() is None and j.killed_at is None:
                        j.stopped, j.killed_at = True, time.monotonic()
                        self._kill(j)
            started = [j for j in jobs.values() if j is not None]
            done = all(j.poll() is not None for j in started)
            waiting = [h for h in HOSTS if cmds[h] is not None and jobs[h] is None]
            if waiting and time.monotonic() - t0 > deadline:
                raise LabError(self.diagnose_run(step, jobs, f"host {waiting[0]} never started: trigger "
                                                 f"{after[waiting[0]]!r} not met within {deadline}s"))
            if done and not waiting:
                break
            time.sleep(0.05)
        for fj in fault_jobs:
            fj.wait()
            if not fj.ok() and failure is None:
                failure = fj
        result = RunResult(jobs["a"], jobs["b"], time.monotonic() - t0, fault_jobs)
        for h in HOSTS:
            j = jobs[h]
            if j is not None and not j.stopped and (j.timed_out or (expect[h] is not None and j.rc != expect[h])):
                raise LabError(self.diagnose(j, expected=expect[h], others=[jobs[o] for o in HOSTS if o != h]))
        if failure is not None:
            raise LabError(self.diagnose(failure))
        return result

    # ---- diagnosis -----------------------------------------------------------------------
    def btmon_tail(self, host: str, lines: int = 25) -> str:
        if not (self.run_dir / host / "btmon.log").exists():
            return "(no capture yet: a failed scenario's retry records one; LAB_BTMON=1 records from boot)"
        return tail(self.run_dir / host / "btmon.log", lines)

    def host_logs(self, host: str, lines: int = 20) -> str:
        hd = self.run_dir / host
        return (f"--- {host} bluetoothd.log (last {lines}) ---\n{tail(hd / 'bluetoothd.log', lines)}\n"
                f"--- {host} btmon trace (last {lines}) ---\n{self.btmon_tail(host, lines)}")

    def diagnose(self, job: Job, expected: int = 0, others: tuple = ()) -> str:
        want = "" if job.timed_out else f" (expected {expected})"
        text = [f"FAIL scenario={self.scenario} host={job.host} step={job.step!r}: {job.describe()}{want}",
                f"  command: {job.command.strip()[:300]}",
                f"--- {job.host} stdout (last 15) ---", tail(job.base.with_suffix('.out'), 15),
                f"--- {job.host} stderr (last 15) ---", tail(job.base.with_suffix('.err'), 15),
                self.host_logs(job.host)]
        for o in others:
            if o is not None:
                text += [f"--- other host {o.host} ({o.describe() if o.rc is not None else 'running'}) "
                         f"stdout+stderr (last 10) ---", "\n".join(o.output().splitlines()[-10:]) or "(empty)",
                         f"--- {o.host} bluetoothd.log (last 10) ---",
                         tail(self.run_dir / o.host / "bluetoothd.log", 10)]
        text.append(f"(full logs: {self.run_dir}/{{a,b}}/, commands: {self.run_dir}/ctl/)")
        return "\n".join(text)

    def diagnose_run(self, step: str, jobs: dict, reason: str) -> str:
        text = [f"FAIL scenario={self.scenario} step={step!r}: {reason}"]
        for h, j in jobs.items():
            if j is not None:
                text += [f"--- {h} output (last 15) ---", "\n".join(j.output().splitlines()[-15:]) or "(empty)"]
            text.append(self.host_logs(h, 12))
        return "\n".join(text)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_for(pred: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def stop_stale() -> None:
    """Take down a lab left behind by an earlier run (only QEMUs started with its sockets)."""
    if not STATE_FILE.exists():
        return
    try:
        s = json.loads(STATE_FILE.read_text())
        lab = Lab(Path(s["run_dir"]), Path(s["sock_dir"]), s["pids"])
    except (OSError, ValueError, KeyError):
        STATE_FILE.unlink(missing_ok=True)
        return
    say("stopping the lab left from an earlier run")
    lab.down(quiet=True)
    STATE_FILE.unlink(missing_ok=True)


def guard_signals() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so `finally: lab.down()` runs (CI cancellation)."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


# ---- CLI ------------------------------------------------------------------------------------
def parse_trigger(text: Optional[str]):
    """'12.5' -> seconds; 'a:REGEX' -> (host, regex); 'a:REGEX+5' -> 5 s after the match."""
    if text is None:
        return None
    m = re.match(r"^([ab]):(.*?)(?:\+([0-9.]+))?$", text, re.S)
    if not m:
        return float(text)
    return (m.group(1), m.group(2), float(m.group(3) or 0))


def parse_fault_spec(text: str):
    """TRIGGER@TARGET:FAULT, e.g. '5@link:cut', 'b:RECEIV@a:power-off'."""
    trig, _, action = text.rpartition("@")
    target, _, fault = action.partition(":")
    if not trig or not fault:
        raise LabError(f"bad --fault {text!r}: expected TRIGGER@TARGET:FAULT, e.g. 5@link:cut")
    return (parse_trigger(trig), (target, fault))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lab.sh", description="two-host virtual BLE lab")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="boot guests a and b")
    u.add_argument("--no-controller", action="append", default=[], choices=HOSTS,
                   help="boot this host without a Bluetooth controller")
    u.add_argument("--mem", type=int, help="MiB per guest (default 768, env LAB_MEM_MB)")
    sub.add_parser("down", help="shut the guests down")
    sub.add_parser("status", help="show the lab's state")
    s = sub.add_parser("sh", help="run one command on a guest")
    s.add_argument("host", choices=HOSTS)
    s.add_argument("command", nargs="+")
    s.add_argument("--deadline", type=float, default=120)
    r = sub.add_parser("run", help="run a command on each host concurrently")
    r.add_argument("--a", help="command for host a")
    r.add_argument("--b", help="command for host b")
    r.add_argument("--deadline", type=float, default=120)
    r.add_argument("--a-after", help="start a after SECONDS or after 'b:REGEX' appeared in b's output")
    r.add_argument("--b-after", help="start b after SECONDS or after 'a:REGEX' appeared in a's output")
    r.add_argument("--finish-with", choices=HOSTS,
                   help="stop the other host's command once this host's command is done")
    r.add_argument("--fault", action="append", default=[],
                   help="TRIGGER@TARGET:FAULT during the run, e.g. 5@link:cut or 'b:SUBSCRIBED@a:power-off'")
    f = sub.add_parser("fault", help="inject a fault now")
    f.add_argument("target", help="a, b or link")
    f.add_argument("fault", help=", ".join(list(Lab.FAULTS) + ["cut", "restore"]))
    sub.add_parser("links", help="list the radio's link profiles (LAB_LINK=NAME selects one)")
    d = sub.add_parser("demo", help="boot if needed, send MESSAGE with bletransfer on a, receive on b")
    d.add_argument("message", nargs="?", default="hello from host a")
    args = p.parse_args(argv)
    guard_signals()
    try:
        if args.cmd == "up":
            Lab.up(no_controller=tuple(args.no_controller), mem_mb=args.mem)
        elif args.cmd == "links":
            print_links()
        elif args.cmd == "down":
            if STATE_FILE.exists():
                stop_stale()
            say("lab down")
        elif args.cmd == "status":
            lab = Lab.current()
            print(json.dumps({"run_dir": str(lab.run_dir), "boot_seconds": lab.boot_seconds,
                              "pids": lab.pids}, indent=1))
            for h in HOSTS:
                print(f"{h}:", lab.sh(h, "hciconfig hci0 2>&1 | sed -n '1,3p'; "
                                         "lab_alive bluetoothd && echo bluetoothd running",
                                      step="status", check=False).stdout().strip())
        elif args.cmd == "sh":
            lab = Lab.current()
            job = lab.sh(args.host, " ".join(args.command), step="sh", deadline=args.deadline, check=False)
            sys.stdout.write(job.stdout())
            sys.stderr.write(job.stderr())
            if job.timed_out:
                say(f"timed out after {args.deadline:g}s")
            return job.rc if job.rc is not None else 124
        elif args.cmd == "run":
            lab = Lab.current()
            res = lab.run(a=args.a, b=args.b, deadline=args.deadline,
                          a_after=parse_trigger(args.a_after), b_after=parse_trigger(args.b_after),
                          timeline=tuple(parse_fault_spec(x) for x in args.fault),
                          finish_with=args.finish_with)
            for h in HOSTS:
                j = getattr(res, h)
                if j is not None:
                    print(f"==== {h}: exit {j.rc} ({j.seconds:.1f}s)")
                    sys.stdout.write(j.stdout())
                    if j.stderr():
                        print(f"---- {h} stderr")
                        sys.stdout.write(j.stderr())
        elif args.cmd == "fault":
            lab = Lab.current()
            job = lab.fault(args.target, args.fault)
            sys.stdout.write(job.output())
        elif args.cmd == "demo":
            return demo(args.message)
    except LabError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


def print_links() -> None:
    """One profile a line, name first: what it models and its flood ceiling over a channel."""
    for name, p in radio_model.PROFILES.items():
        mark = "*" if name == radio_model.DEFAULT_PROFILE else " "
        if p.timed:
            ceiling = radio_model.profile_channel_ceiling(p) / 1000
            best = radio_model.profile_channel_ceiling(p, radio_model.best_link(p)) / 1000
            figures = f"ceiling {ceiling:.1f} kB/s untuned, {best:.1f} kB/s tuned"
        else:
            figures = "no ceiling (the guests' CPUs set the pace)"
        print(f"{name:<14}{mark} {p.summary}; {figures}")


def demo(message: str) -> int:
    """The README's main job: two hosts, `bletransfer send` on a, `bletransfer receive` on b."""
    bin_path = os.environ.get("BLETRANSFER_BIN") or str(REPO / ".build" / "debug" / "bletransfer")
    if Path("/sys/class/bluetooth").exists() and any(Path("/sys/class/bluetooth").iterdir()):
        print("This machine has a Bluetooth adapter. Run on two hosts:\n"
              f"  host A: {bin_path} send {shlex.quote(message)}\n"
              f"  host B: {bin_path} receive")
        return 0
    if not Path(bin_path).exists():
        raise LabError(f"no bletransfer binary at {bin_path} (build it: swift build, or set BLETRANSFER_BIN)")
    os.environ["BLETRANSFER_BIN"] = bin_path
    owned = not STATE_FILE.exists()
    lab = Lab.up() if owned else Lab.current()
    try:
        lab.scenario = "demo"
        lab.ensure_ready()
        say("host a: bletransfer send; host b: bletransfer receive")
        res = lab.run(a=f'"$BLETRANSFER_BIN" send {shlex.quote(message)}',
                      b='"$BLETRANSFER_BIN" receive', deadline=float(os.environ.get("LAB_DEMO_DEADLINE", "180")),
                      b_after=2.0, step="demo", finish_with="b")
        print(f"host b received: {res.job('b').stdout().strip()}")
    finally:
        if owned:
            lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
