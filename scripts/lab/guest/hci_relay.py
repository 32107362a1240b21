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

Links that end without a word: the emulator forgets a controller's connections on HCI Reset
without telling the peer, which keeps its end "connected" forever (a radio would see its
supervision timeout). Then the peer's host disconnects a handle the emulator no longer knows,
gets a Disconnection Complete for handle 0, and the kernel keeps the connection object: every
later connection attempt to that address waits on it until the adapter is power-cycled. So,
before it passes on a host's HCI Reset, the relay disconnects each connection it has seen on
this controller with reason "Connection Timeout" (hiding the local replies): the peer sees what
a supervision timeout would show. And a Disconnection Complete "Unknown Connection Identifier"
for handle 0 is reported for the handle the host asked to disconnect, as a dead link would be.

A connection attempt to a peer that is not advertising: the emulator fails an LE Create
Connection at once ("Connection Failed to be Established", 0x3E, microseconds after its Command
Status) when the peer is not advertising at that instant, as when the peer's bluetoothd is
re-registering its advertisement. A real initiator keeps listening for the peer until it
connects or the host cancels. Linux 6.1 does not take that instant failure for its pending
connection: its wait ends after 20 s, the emulator refuses the cancel, and the connection object
stays pending, so every later attempt to that address hangs until the adapter is power-cycled.
The relay behaves as an initiator would: it hides the failure and sends the host's command
again every --retry-connect-ms (default 100) until it connects; a host's cancel meanwhile gets
the Command Complete and the Connection Complete "Unknown Connection Identifier" (0x02) a
controller sends for a cancelled attempt.

Quiet radio (SIGHUP, from guest a's lab_power off and lab_stop_bluetoothd, before the power-off):
the kernel closes a controller without resetting it, and a command it queued just before (an
advertisement being re-enabled) can reach the emulator after the close, so the emulated
controller would go on advertising and accept connections for a host that is gone; a central
connecting then meets a link that never answers. The relay turns advertising off at once and,
until the host's next HCI Reset (the first command of a power-on) or SIGALRM, answers the
host's "advertising enable" commands itself without passing them on.
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
    p.add_argument("--retry-connect-ms", type=float, default=100)
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


def split_packets(buf: bytes):
    """The whole H4 packets at the start of buf, and the incomplete rest."""
    packets = []
    while True:
        n = h4_length(buf)
        if n is None or len(buf) < n:
            return packets, buf
        packets.append(buf[:n])
        buf = buf[n:]


LE_CREATE_CONNECTION = 0x200D
LE_CREATE_CONNECTION_CANCEL = 0x200E


def cancelled_connection(create: bytes) -> bytes:
    """The LE Connection Complete a controller reports for a cancelled LE Create Connection:
    status 0x02, no handle, the peer the command named (its address type and address)."""
    peer_type, peer = create[9], create[10:16]
    params = bytes([0x01, 0x02, 0x00, 0x00, 0x00, peer_type]) + peer + bytes(7)
    return bytes([0x04, 0x3E, len(params)]) + params


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
    hidden_disconnects = set()  # handles dropped before a reset: their completions stay hidden
    host_disconnects = []   # handles the host asked to disconnect, oldest first

    def on_cut(*_):
        state["cut"] = True
        state["pending_cut"] = time.monotonic() + 0.3

    def on_restore(*_):
        state["cut"], state["pending_cut"] = False, 0.0
        print("hci_relay: radio restored", flush=True)

    def on_quiet(*_):
        state["quiet_pending"] = True

    def on_quiet_end(*_):
        state["quiet"] = state["quiet_pending"] = False

    state["quiet"] = state["quiet_pending"] = False
    injected_complete = []  # opcodes of our own commands whose Command Complete the host must not see
    # The host's LE Create Connection under way (None: none), and when the relay sends it again
    # after the emulator failed it at once (0.0: not waiting to).
    initiating = {"command": None, "retry_at": 0.0, "hidden_status": 0}
    signal.signal(signal.SIGHUP, on_quiet)
    signal.signal(signal.SIGALRM, on_quiet_end)
    signal.signal(signal.SIGUSR1, on_cut)
    signal.signal(signal.SIGUSR2, on_restore)

    def end_links(reason: int):
        """Disconnect every link of this controller; the host never sees the replies."""
        for h in sorted(handles):
            sock.sendall(bytes([0x01, 0x06, 0x04, 0x03, h & 0xFF, h >> 8, reason]))
            injected_status[0] += 1
            hidden_disconnects.add(h)
        handles.clear()
        host_disconnects.clear()

    def from_emulator(packet: bytes):
        """Adjust one packet from the emulator; None drops it."""
        if packet[0] != 0x04:
            return packet
        code = packet[1]
        if code == 0x3E and len(packet) > 4:
            sub = packet[3]
            if sub in ADV_REPORT_SUBEVENTS:
                return None if state["cut"] else with_rssi(packet)
            if sub == 0x01 and len(packet) > 4 and packet[4] == 0x3E and initiating["command"]:
                # Failed at once: a real initiator would still be listening for the peer.
                if not initiating["retry_at"]:
                    print("hci_relay: peer not advertising yet; initiating goes on", flush=True)
                initiating["retry_at"] = time.monotonic() + args.retry_connect_ms / 1000.0
                return None
            if sub in (0x01, 0x0A) and len(packet) > 4:
                initiating["command"], initiating["retry_at"] = None, 0.0
            if sub in (0x01, 0x0A) and len(packet) > 6 and packet[4] == 0:  # (Enhanced) Connection Complete
                handles.add(int.from_bytes(packet[5:7], "little") & 0x0FFF)
                print(f"hci_relay: connection {sorted(handles)}", flush=True)
        elif code == 0x05 and len(packet) >= 7:  # Disconnection Complete
            handle = int.from_bytes(packet[4:6], "little") & 0x0FFF
            if packet[3] == 0x02 and handle == 0 and host_disconnects:
                # The emulator had already forgotten the link: report it ended.
                handle = host_disconnects.pop(0)
                print(f"hci_relay: disconnection of unknown link {handle} reported as ended", flush=True)
                handles.discard(handle)
                return bytes([0x04, 0x05, 0x04, 0x00, handle & 0xFF, handle >> 8, 0x16])
            if handle in host_disconnects:
                host_disconnects.remove(handle)
            if handle in hidden_disconnects:
                hidden_disconnects.discard(handle)
                return None
            handles.discard(handle)
            print(f"hci_relay: disconnection, reason 0x{packet[6]:02x}{' -> 0x08' if state['cut'] else ''}", flush=True)
            if state["cut"]:
                p = bytearray(packet)
                p[6] = 0x08  # Connection Timeout
                return bytes(p)
        elif code == 0x0E and len(packet) >= 6 and int.from_bytes(packet[4:6], "little") in injected_complete:
            injected_complete.remove(int.from_bytes(packet[4:6], "little"))  # reply to our own command
            return None
        elif code == 0x0F and len(packet) >= 7 and int.from_bytes(packet[5:7], "little") in injected_complete:
            injected_complete.remove(int.from_bytes(packet[5:7], "little"))  # our own command, refused
            return None
        elif code == 0x0F and len(packet) >= 7 and initiating["hidden_status"] > 0 \
                and int.from_bytes(packet[5:7], "little") == LE_CREATE_CONNECTION:
            initiating["hidden_status"] -= 1  # Command Status of a command sent again
            return None
        elif code == 0x0F and len(packet) >= 7 and injected_status[0] > 0 \
                and int.from_bytes(packet[5:7], "little") == 0x0406:
            injected_status[0] -= 1  # Command Status of our own Disconnect: not the host's
            return None
        return packet

    sel = selectors.DefaultSelector()
    sel.register(transport, selectors.EVENT_READ, "host")
    sel.register(sock, selectors.EVENT_READ, "controller")
    from_controller = b""
    from_host = b""

    def to_emulator(packet: bytes):
        """Watch one packet from the host on its way to the emulator."""
        if packet[0] == 0x01 and len(packet) >= 4:
            opcode = int.from_bytes(packet[1:3], "little")
            if opcode == LE_CREATE_CONNECTION and len(packet) >= 16:
                initiating["command"], initiating["retry_at"] = packet, 0.0
            elif opcode == LE_CREATE_CONNECTION_CANCEL and initiating["retry_at"]:
                # Between two tries the emulator has nothing to cancel: answer as a controller.
                create = initiating["command"]
                initiating["command"], initiating["retry_at"] = None, 0.0
                now = time.monotonic()
                queue.append((now, bytes([0x04, 0x0E, 0x04, 0x01, packet[1], packet[2], 0x00])))
                queue.append((now, cancelled_connection(create)))
                print("hci_relay: connection attempt cancelled by the host", flush=True)
                return
            elif opcode == LE_CREATE_CONNECTION_CANCEL:
                initiating["command"] = None  # the emulator answers; a failure then is the host's to see
            elif opcode == 0x0406 and len(packet) >= 6:  # Disconnect
                host_disconnects.append(int.from_bytes(packet[4:6], "little") & 0x0FFF)
            elif opcode == 0x0C03:  # Reset: end each link first, as a radio would
                initiating["command"], initiating["retry_at"] = None, 0.0
                if state["quiet"]:
                    state["quiet"] = False
                    print("hci_relay: host reset, radio no longer quiet", flush=True)
                if handles:
                    print(f"hci_relay: reset, ending {len(handles)} connection(s) first", flush=True)
                    end_links(0x08)
            elif state["quiet"] and opcode in (0x200A, 0x2039) and len(packet) >= 5 and packet[4] == 0x01:
                # Advertising enable while quiet: answered here, the emulator never sees it.
                complete = bytes([0x04, 0x0E, 0x04, 0x01, packet[1], packet[2], 0x00])
                queue.append((time.monotonic(), complete))
                print("hci_relay: quiet radio, advertising enable not passed on", flush=True)
                return
        sock.sendall(packet)
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
        if state["quiet_pending"]:
            state["quiet_pending"], state["quiet"] = False, True
            for command in (bytes([0x01, 0x0A, 0x20, 0x01, 0x00]),          # LE Set Advertising Enable: off
                            bytes([0x01, 0x39, 0x20, 0x02, 0x00, 0x00])):   # LE Set Extended Advertising Enable: off, all sets
                injected_complete.append(int.from_bytes(command[1:3], "little"))
                sock.sendall(command)
            print("hci_relay: quiet radio: advertising off", flush=True)
        if initiating["retry_at"] and time.monotonic() >= initiating["retry_at"]:
            initiating["retry_at"] = 0.0
            initiating["hidden_status"] += 1
            sock.sendall(initiating["command"])
        timeout = 0.2
        if initiating["retry_at"]:
            timeout = min(timeout, max(0.0, initiating["retry_at"] - time.monotonic()))
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
                packets, from_host = split_packets(from_host + data)
                for packet in packets:
                    to_emulator(packet)
            else:
                data = sock.recv(65536)
                if not data:
                    return 0
                packets, from_controller = split_packets(from_controller + data)
                for packet in packets:
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
