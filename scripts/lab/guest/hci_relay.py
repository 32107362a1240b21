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
"""
import argparse
import os
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

    sel = selectors.DefaultSelector()
    sel.register(transport, selectors.EVENT_READ, "host")
    sel.register(sock, selectors.EVENT_READ, "controller")
    from_controller = b""
    queue = []  # (release time, packet), in order
    delay = args.adv_delay_ms / 1000.0
    last_release = 0.0
    while True:
        timeout = None
        if queue:
            timeout = max(0.0, queue[0][0] - time.monotonic())
        for key, _ in sel.select(timeout):
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
                    if is_report:
                        packet = with_rssi(packet)
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
