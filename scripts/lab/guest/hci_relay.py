#!/usr/bin/env python3
"""Relay between a guest's HCI transport (a pty for btattach, or the virtio-serial port that
carries the other guest's controller) and one emulated controller of `btvirt -s`.

Why not plain socat: the emulator answers instantly, so an advertising report can reach the
host stack in the same instant as the Command Complete of LE Set Scan Enable, before the
kernel has marked discovery active; the kernel then drops the report and, with the
controller's duplicate filter on, never sees that device during this scan. A real controller
reports only after a scan window. The relay holds advertising-report events back by
--adv-delay-ms (default 40), keeping every packet in order.

The emulator also reports every advertisement with RSSI 127 ("not available"). bluetoothd then
has nothing new to say about a device it already knows, emits no PropertiesChanged, and a
central that waits for advertisements (bleak, and any BlueZ client that does not also read
GetManagedObjects) never sees the peer again. The relay fills in a plausible, varying RSSI
(-75..-40 dBm), as a radio would. All other traffic is copied as is.

Radio cut (SIGUSR1) and restore (SIGUSR2): on a cut, the relay asks the emulator to drop every
connection it has seen on this controller (HCI Disconnect), hides its own Command Status, and
reports the resulting Disconnection Complete to the host as "Connection Timeout" (0x08), which
is what a supervision timeout looks like; until the restore it drops every advertising report,
so the hosts can neither see nor reach each other. The controllers themselves stay up.
"""
import argparse
import os
import signal
import random
import selectors
import socket
import sys
import time
import tty

ADV_REPORT_SUBEVENTS = {0x02, 0x0B, 0x0D}  # LE Advertising, Direct Advertising, Extended Advertising


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--pty-link", help="create a pty and link its slave here (for btattach)")
    where.add_argument("--device", help="character device carrying H4 (virtio-serial port)")
    p.add_argument("--server", default="/tmp/bt-server-bredrle", help="btvirt server socket")
    p.add_argument("--adv-delay-ms", type=float, default=40)
    return p.parse_args()


def h4_length(buf: bytes):
    """Total length of the first H4 packet in buf, or None if the header is incomplete."""
    if not buf:
        return None
    kind = buf[0]
    if kind == 0x04:  # event: code, plen
        return 3 + buf[2] if len(buf) >= 3 else None
    if kind == 0x02:  # ACL: handle(2), len(2)
        return 5 + int.from_bytes(buf[3:5], "little") if len(buf) >= 5 else None
    if kind == 0x03:  # SCO: handle(2), len(1)
        return 4 + buf[3] if len(buf) >= 4 else None
    if kind == 0x05:  # ISO: handle(2), len(14 bits)
        return 5 + (int.from_bytes(buf[3:5], "little") & 0x3FFF) if len(buf) >= 5 else None
    if kind == 0x01:  # command: opcode(2), plen
        return 4 + buf[3] if len(buf) >= 4 else None
    raise ValueError(f"unknown H4 packet type 0x{kind:02x}")


def with_rssi(packet: bytes) -> bytes:
    """An LE (extended) advertising report event with RSSI 127 replaced by a radio-like value."""
    p = bytearray(packet)
    sub, count, i = p[3], p[4], 5
    try:
        for _ in range(count):
            if sub == 0x02:  # type, addr type, addr(6), len, data, rssi
                n = p[i + 8]
                at = i + 9 + n
                i = at + 1
            elif sub == 0x0D:  # type(2), addr type, addr(6), phy, phy2, sid, tx, rssi, ...
                at = i + 13
                n = p[i + 23]
                i = i + 24 + n
            else:
                return packet
            if p[at] == 0x7F:
                p[at] = (256 + random.randint(-75, -40)) & 0xFF
    except IndexError:
        return packet
    return bytes(p)


def write_all(fd: int, data: bytes):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[n:]


def main():
    args = parse_args()
    if args.pty_link:
        master, slave = os.openpty()
        tty.setraw(slave)
        name = os.ttyname(slave)
        tmp = args.pty_link + ".tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(name, tmp)
        os.replace(tmp, args.pty_link)
        transport = master  # the slave stays open so the pty keeps its settings
    else:
        transport = os.open(args.device, os.O_RDWR | os.O_NOCTTY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.server)
    print(f"hci_relay: {args.pty_link or args.device} <-> {args.server}", flush=True)

    # The cut is signalled to both relays at about the same moment; each waits a little before
    # dropping its connections so both already rewrite the resulting Disconnection Complete.
    state = {"cut": False, "pending_cut": 0.0}
    handles = set()         # connection handles open on this controller
    injected_status = [0]   # Command Status events owed for our own HCI Disconnects

    def on_cut(*_):
        state["cut"] = True
        state["pending_cut"] = time.monotonic() + 0.3

    def on_restore(*_):
        state["cut"], state["pending_cut"] = False, 0.0
        print("hci_relay: radio restored", flush=True)

    signal.signal(signal.SIGUSR1, on_cut)
    signal.signal(signal.SIGUSR2, on_restore)

    def from_emulator(packet: bytes):
        """Adjust one packet from the emulator; None drops it."""
        if packet[0] != 0x04:
            return packet
        code = packet[1]
        if code == 0x3E and len(packet) > 4:
            sub = packet[3]
            if sub in ADV_REPORT_SUBEVENTS:
                return None if state["cut"] else with_rssi(packet)
            if sub in (0x01, 0x0A) and len(packet) > 6 and packet[4] == 0:  # (Enhanced) Connection Complete
                handles.add(int.from_bytes(packet[5:7], "little") & 0x0FFF)
                print(f"hci_relay: connection {sorted(handles)}", flush=True)
        elif code == 0x05 and len(packet) >= 7:  # Disconnection Complete
            handles.discard(int.from_bytes(packet[4:6], "little") & 0x0FFF)
            print(f"hci_relay: disconnection, reason 0x{packet[6]:02x}{' -> 0x08' if state['cut'] else ''}", flush=True)
            if state["cut"]:
                p = bytearray(packet)
                p[6] = 0x08  # Connection Timeout
                return bytes(p)
        elif code == 0x0F and len(packet) >= 7 and injected_status[0] > 0 \
                and int.from_bytes(packet[5:7], "little") == 0x0406:
            injected_status[0] -= 1  # Command Status of our own Disconnect: not the host's
            return None
        return packet

    sel = selectors.DefaultSelector()
    sel.register(transport, selectors.EVENT_READ, "host")
    sel.register(sock, selectors.EVENT_READ, "controller")
    from_controller = b""
    queue = []  # (release time, packet), in order
    delay = args.adv_delay_ms / 1000.0
    last_release = 0.0
    while True:
        if state["pending_cut"] and time.monotonic() >= state["pending_cut"]:
            state["pending_cut"] = 0.0
            for h in sorted(handles):
                sock.sendall(bytes([0x01, 0x06, 0x04, 0x03, h & 0xFF, h >> 8, 0x13]))
                injected_status[0] += 1
            print(f"hci_relay: radio cut, dropping {len(handles)} connection(s)", flush=True)
        timeout = 0.2
        if queue:
            timeout = min(timeout, max(0.0, queue[0][0] - time.monotonic()))
        try:
            ready = sel.select(timeout)
        except InterruptedError:
            continue
        for key, _ in ready:
            if key.data == "host":
                try:
                    data = os.read(transport, 65536)
                except OSError:
                    data = b""
                if not data:
                    if args.pty_link:  # btattach went away; wait for the next one
                        time.sleep(0.1)
                        continue
                    return 0
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return 0
                from_controller += data
                while True:
                    n = h4_length(from_controller)
                    if n is None or len(from_controller) < n:
                        break
                    packet, from_controller = from_controller[:n], from_controller[n:]
                    now = time.monotonic()
                    is_report = (packet[0] == 0x04 and packet[1] == 0x3E and len(packet) > 4
                                 and packet[3] in ADV_REPORT_SUBEVENTS)
                    hold = delay if is_report else 0.0
                    packet = from_emulator(packet)
                    if packet is None:
                        continue
                    last_release = max(last_release, now + hold)
                    queue.append((last_release, packet))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            write_all(transport, queue.pop(0)[1])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
