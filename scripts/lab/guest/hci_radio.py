#!/usr/bin/env python3
"""The lab's radio: one process between both hosts' HCI transports and BlueZ's controller
emulator (`btvirt -s`), where every packet of both directions passes on one clock.

    host a's kernel ─ btattach ─ pty ─┐                  ┌─ btvirt (advertising, scanning,
                                      ├─ hci_radio.py ───┤   connecting, encryption)
    host b's kernel ─ btattach ─ virtio console ─┘       └─ (ACL data never goes there)

Under a timed profile (radio_model.PROFILES; all but `instant`) the emulator still makes and
ends connections, but data does not go through it: each ACL packet a host hands its controller
waits for a connection event of the link's interval, goes out in link-layer packets of the
link's data length and PHY, as many per event as the profile's controller sends, and reaches
the other host only then; Number of Completed Packets tells the sending host so at that moment,
so the kernel's flow control and the L2CAP credits meet the back-pressure of a radio. The
controllers report the profile's buffers, features and commands; the tuning commands (LE Set
PHY, LE Set Default PHY, LE Read PHY, LE Set Data Length and its defaults, LE Connection Update
and the peripheral's parameter request) are answered here as the profile's controllers would,
with their completion events at the procedure's instant. Advertising reports arrive when an
advertising event of the advertiser's interval falls in one of the scanner's windows, and a
connection is made at the advertiser's next event in the initiator's window. A lost packet goes
again later; a link that hears nothing for its supervision timeout ends with Connection
Timeout (0x08) on both sides.

Under `instant` the emulator is used as it is (data through it, delivered at once), with the
fixes below that every profile keeps:
- Advertising reports are held back 40 ms (else the kernel can drop the first report of a scan
  before discovery is marked active, and the duplicate filter never repeats it), and RSSI 127
  ("not available") becomes a plausible, varying value (else bluetoothd emits no
  PropertiesChanged for a known device and bleak-style centrals never see it again).
- Radio cut (`cut`/`restore` on the control socket): every link ends on both sides with
  Connection Timeout (0x08), as after a supervision timeout, and no advertising report gets
  through until the restore; the controllers stay up.
- The emulator forgets a controller's links on HCI Reset without telling the peer, whose kernel
  then waits on a dead connection object in every later attempt to that address: before a
  host's Reset is passed on, each of its links is ended with Connection Timeout, and a
  Disconnection Complete "Unknown Connection Identifier" for handle 0 is reported for the
  handle the host asked to disconnect.
- The emulator fails an LE Create Connection at once when the peer is not advertising that
  instant (a restarting bluetoothd); Linux 6.1 then keeps the attempt pending forever. A real
  initiator keeps listening: the radio hides the failure and tries again every 100 ms (or at
  the peer's next advertising event), and answers a host's cancel in between as a controller.
- Quiet radio (`quiet a`, before guest a's power-off): the kernel closes a controller without
  resetting it, and an advertising enable queued just before can reach the emulator after the
  close; so advertising is turned off at once and, until the host's next Reset or `normal a`,
  the host's advertising enables are answered here and not passed on.

Control socket (one command a connection, one line back): `attach a|b`, `detach a|b`, `cut`,
`restore`, `quiet a`, `normal a`, `profile NAME`, `reset-eatt a|b` (one Enhanced ATT channel
ends for that host alone, as a failing bearer), `drop-confirmations a|b on|off` (that host's
ATT confirmations never reach its peer), `loss P [SHARE_ON_1M]` (the share of packets
lost from now on, as at the edge of range, and how much of it 1M keeps), `status` (JSON: profile, links and what they run at, packets
lost).
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import selectors
import socket
import sys
import time
import tty
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radio_model as rm  # noqa: E402

CMD, ACL, EVT = 0x01, 0x02, 0x04
ADV_REPORT_SUBEVENTS = {0x02, 0x0B, 0x0D}
OP_DISCONNECT = 0x0406
OP_RESET = 0x0C03
OP_READ_LOCAL_COMMANDS = 0x1002
OP_READ_BD_ADDR = 0x1009
OP_LE_SET_EVENT_MASK = 0x2001
OP_LE_READ_BUFFER_SIZE = 0x2002
OP_LE_READ_FEATURES = 0x2003
OP_LE_SET_RANDOM_ADDRESS = 0x2005
OP_LE_SET_ADV_PARAMETERS = 0x2006
OP_LE_SET_ADV_ENABLE = 0x200A
OP_LE_SET_SCAN_PARAMETERS = 0x200B
OP_LE_SET_SCAN_ENABLE = 0x200C
OP_LE_CREATE_CONNECTION = 0x200D
OP_LE_CREATE_CONNECTION_CANCEL = 0x200E
OP_LE_CONNECTION_UPDATE = 0x2013
OP_LE_CONN_PARAM_REPLY = 0x2020
OP_LE_CONN_PARAM_NEGATIVE_REPLY = 0x2021
OP_LE_SET_DATA_LENGTH = 0x2022
OP_LE_READ_DEFAULT_DATA_LENGTH = 0x2023
OP_LE_WRITE_DEFAULT_DATA_LENGTH = 0x2024
OP_LE_READ_MAX_DATA_LENGTH = 0x202F
OP_LE_READ_PHY = 0x2030
OP_LE_SET_DEFAULT_PHY = 0x2031
OP_LE_SET_PHY = 0x2032
OP_LE_SET_EXT_ADV_ENABLE = 0x2039
OP_LE_READ_BUFFER_SIZE_V2 = 0x2060
# Supported-commands bits (octet, mask) of the commands answered here (Core Vol 4, Part E 6.27).
TUNING_COMMAND_BITS = {
    "data_length": ((33, 0x40), (33, 0x80), (34, 0x01), (35, 0x08)),
    "phy": ((35, 0x10), (35, 0x20), (35, 0x40)),
}
LE_FEATURE_DATA_LENGTH = (0, 0x20)
LE_FEATURE_2M = (1, 0x01)
LE_FEATURE_CODED = (1, 0x08)
LE_FEATURE_CONN_PARAM_REQUEST = (0, 0x02)
# LE meta subevents and their bits in LE Set Event Mask.
SUB_CONN_UPDATE_COMPLETE, SUB_REMOTE_FEATURES, SUB_CONN_PARAM_REQUEST = 0x03, 0x04, 0x06
SUB_DATA_LENGTH_CHANGE, SUB_PHY_UPDATE_COMPLETE = 0x07, 0x0C
DEFAULT_LE_EVENT_MASK = 0x1F
KERNEL_DEFAULT_ADV_INTERVAL = 0x0800  # 1.28 s, the kernel's le_adv_min/max_interval
PROCEDURE_INSTANT_EVENTS = 6  # an update takes effect at least 6 events later (Vol 6 Part B 5.1)


def le16(b, i):
    return int.from_bytes(b[i:i + 2], "little")


def put16(v):
    return int(v).to_bytes(2, "little")


def h4_length(buf: bytes):
    """Total length of the first H4 packet in buf, or None if the header is incomplete."""
    if not buf:
        return None
    kind = buf[0]
    if kind == EVT:
        return 3 + buf[2] if len(buf) >= 3 else None
    if kind == ACL:
        return 5 + le16(buf, 3) if len(buf) >= 5 else None
    if kind == 0x03:
        return 4 + buf[3] if len(buf) >= 4 else None
    if kind == 0x05:
        return 5 + (le16(buf, 3) & 0x3FFF) if len(buf) >= 5 else None
    if kind == CMD:
        return 4 + buf[3] if len(buf) >= 4 else None
    raise ValueError(f"unknown H4 packet type 0x{kind:02x}")


def split_packets(buf: bytes):
    packets = []
    while True:
        n = h4_length(buf)
        if n is None or len(buf) < n:
            return packets, buf
        packets.append(buf[:n])
        buf = buf[n:]


def with_rssi(packet: bytes) -> bytes:
    """An LE (extended) advertising report with RSSI 127 replaced by a radio-like value."""
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


def command_complete(opcode: int, params: bytes) -> bytes:
    body = bytes([0x01]) + put16(opcode) + params
    return bytes([EVT, 0x0E, len(body)]) + body


def command_status(opcode: int, status: int = 0) -> bytes:
    return bytes([EVT, 0x0F, 4, status, 0x01]) + put16(opcode)


def le_meta(sub: int, params: bytes) -> bytes:
    return bytes([EVT, 0x3E, 1 + len(params), sub]) + params


def cancelled_connection(create: bytes) -> bytes:
    """The LE Connection Complete a controller reports for a cancelled LE Create Connection."""
    peer_type, peer = create[9], create[10:16]
    return le_meta(0x01, bytes([0x02, 0x00, 0x00, 0x00, peer_type]) + peer + bytes(7))


def log(msg: str) -> None:
    print(f"hci_radio: {msg}", flush=True)


class Timers:
    def __init__(self):
        self.heap = []
        self.seq = itertools.count()

    def at(self, when: float, fn) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), fn))

    def next_time(self):
        return self.heap[0][0] if self.heap else None

    def run_due(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            _, _, fn = heapq.heappop(self.heap)
            fn()


class Side:
    """One emulated controller as its host sees it."""

    def __init__(self, radio: "Radio", name: str):
        self.radio, self.name = radio, name
        self.transport = None
        self.emu = None
        self.from_host = b""
        self.from_emu = b""
        self.out = deque()        # (release time, packet), release times never decrease
        self.last_release = 0.0
        self.reset_state()

    def reset_state(self):
        """What a controller forgets on HCI Reset (or when it is plugged in)."""
        self.address = None
        self.le_event_mask = DEFAULT_LE_EVENT_MASK
        self.default_phys = (0x07, 0x07)  # no preference
        self.suggested_tx = rm.MIN_DATA_LENGTH
        self.adv_enabled = False
        self.adv_interval_units = KERNEL_DEFAULT_ADV_INTERVAL
        self.scan_enabled = False
        self.scan_interval_units, self.scan_window_units = 0x0060, 0x0030
        self.scan_started = 0.0
        self.create = None        # the host's LE Create Connection under way
        self.create_last = None   # the last one, for the parameters of the link it made
        self.create_forward_at = 0.0  # when it goes (again) to the emulator; 0: not waiting
        self.create_hidden_status = 0
        self.quiet = getattr(self, "quiet", False)
        self.handles = set()
        self.host_disconnects = []
        self.hidden_disconnects = set()
        self.timed_out = set()     # handles ended by the supervision timeout: reason 0x08
        self.hidden_status = {}    # opcode -> Command Status events of ours to hide
        self.hidden_complete = {}  # opcode -> Command Complete events of ours to hide
        self.pending_complete = None  # (handle, role) of a connection not paired yet
        self.held_acl = {}         # handle -> ACL packets sent before the link was paired
        self.pending_report_at = 0.0
        self.drops_confirmations = getattr(self, "drops_confirmations", False)

    # ---- output to the host, in order ----------------------------------------------------
    def send(self, packet: bytes, at: float = 0.0) -> None:
        self.last_release = max(self.last_release, at or time.monotonic())
        self.out.append((self.last_release, packet))

    def le_event(self, sub: int, params: bytes, at: float = 0.0) -> None:
        if self.le_event_mask & (1 << (sub - 1)):
            self.send(le_meta(sub, params), at)

    def hide(self, table: dict, opcode: int) -> None:
        table[opcode] = table.get(opcode, 0) + 1

    def take_hidden(self, table: dict, opcode: int) -> bool:
        if table.get(opcode, 0) > 0:
            table[opcode] -= 1
            return True
        return False

    def to_emulator(self, packet: bytes) -> None:
        if self.emu is not None:
            try:
                self.emu.sendall(packet)
            except OSError as e:
                log(f"{self.name}: emulator write failed: {e}")


class Link:
    """A connection between the two hosts, under a timed profile."""

    def __init__(self, radio: "Radio", central: Side, c_handle: int, peripheral: Side,
                 p_handle: int, settings: rm.LinkSettings):
        self.radio = radio
        self.central, self.c_handle = central, c_handle
        self.peripheral, self.p_handle = peripheral, p_handle
        self.model = rm.LinkModel(radio.profile, settings, radio.rng)
        now = time.monotonic()
        self.anchor = now + 0.00125  # the first event after the transmit window
        self.event = 0               # index of the next event from the anchor
        self.scheduled = False
        self.procedures = []         # (event index, callable)
        self.last_heard = now
        self.closed = False
        self.delivered = [0, 0]      # bytes per direction
        # Enhanced ATT channels (PSM 0x0027) seen in the LE signaling: (central's CID,
        # peripheral's CID), and requests awaiting their response, by (requesting side, ident).
        self.eatt = []
        self.eatt_requests = {}
        # Disconnection responses to hide: the side that answers and the ident it answers.
        self.hidden_responses = set()

    @property
    def settings(self) -> rm.LinkSettings:
        return self.model.settings

    def handle_on(self, side: Side) -> int:
        return self.c_handle if side is self.central else self.p_handle

    def other(self, side: Side) -> Side:
        return self.peripheral if side is self.central else self.central

    def direction_from(self, side: Side) -> int:
        return rm.CENTRAL_TO_PERIPHERAL if side is self.central else rm.PERIPHERAL_TO_CENTRAL

    def event_time(self, index: int) -> float:
        return self.anchor + index * self.settings.interval_us / 1e6

    def schedule(self) -> None:
        if self.scheduled or self.closed:
            return
        if not (self.model.busy() or self.procedures or self.model.cut):
            return
        now = time.monotonic()
        interval = self.settings.interval_us / 1e6
        if self.event_time(self.event) < now:
            self.event = max(self.event, int((now - self.anchor) / interval) + 1)
        self.scheduled = True
        self.radio.timers.at(self.event_time(self.event), self.run_event)

    def run_event(self) -> None:
        self.scheduled = False
        if self.closed:
            return
        t = self.event_time(self.event)
        index = self.event
        self.event += 1
        deliveries, heard = self.model.run_event()
        if heard:
            self.last_heard = t
        for d in deliveries:
            self.radio.delivered(self, d, t + d.at_us / 1e6)
        for entry in [p for p in self.procedures if p[0] <= index]:
            self.procedures.remove(entry)
            entry[1](t)
        timeout = self.settings.timeout_units * 0.01
        if not self.closed and t - self.last_heard > timeout:
            self.radio.supervision_timeout(self)
            return
        self.schedule()

    def at_instant(self, fn, events: int = PROCEDURE_INSTANT_EVENTS) -> None:
        now = time.monotonic()
        interval = self.settings.interval_us / 1e6
        current = max(self.event, int((now - self.anchor) / interval) + 1)
        self.procedures.append((current + events - 1, fn))
        self.schedule()

    def change_settings(self, t: float, **changes) -> None:
        """New settings from event time t on (an interval change moves the anchor there)."""
        old = self.model.settings
        new = rm.LinkSettings(**{**old.__dict__, **changes})
        if new.interval_units != old.interval_units:
            self.anchor = t
            self.event = 1
        self.model.settings = new


class Radio:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.profile = rm.PROFILES[args.profile]
        self.timers = Timers()
        self.sides = {"a": Side(self, "a"), "b": Side(self, "b")}
        self.links = []
        self.cut = False
        self.pending_cut = 0.0
        self.forming = None   # settings for the connection being made (both completes use them)
        self.sel = selectors.DefaultSelector()
        self.pty_link = args.pty_link
        self.device = args.device
        self.control = None

    # ---- plumbing ------------------------------------------------------------------------
    def open_transport(self, side: Side, kind: str) -> None:
        if kind == "pty":
            master, slave = os.openpty()
            tty.setraw(slave)
            name = os.ttyname(slave)
            tmp = self.pty_link + ".tmp"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(name, tmp)
            os.replace(tmp, self.pty_link)
            side.pty_slave = slave  # kept open so the pty keeps its settings
            side.transport = master
        else:
            side.transport = os.open(kind, os.O_RDWR | os.O_NOCTTY)
        os.set_blocking(side.transport, False)
        self.sel.register(side.transport, selectors.EVENT_READ, ("host", side))

    def attach(self, name: str, device=None) -> str:
        side = self.sides[name]
        if side.transport is None:
            self.open_transport(side, "pty" if name == "a" else (device or self.device))
        if side.emu is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.args.server)
            side.emu = sock
            side.from_emu = b""
            side.reset_state()
            self.sel.register(sock, selectors.EVENT_READ, ("emu", side))
        log(f"{name}: {'pty ' + self.pty_link if name == 'a' else device or self.device} <-> {self.args.server}")
        return "ok attached"

    def detach(self, name: str) -> str:
        side = self.sides[name]
        for link in [l for l in self.links if side in (l.central, l.peripheral)]:
            self.forget(link)
        if side.emu is not None:
            self.sel.unregister(side.emu)
            side.emu.close()
            side.emu = None
        side.reset_state()
        log(f"{name}: controller off the air")
        return "ok detached"

    def forget(self, link: Link) -> None:
        link.closed = True
        if link in self.links:
            self.links.remove(link)

    def link_of(self, side: Side, handle: int):
        for link in self.links:
            if (link.central is side and link.c_handle == handle) or \
                    (link.peripheral is side and link.p_handle == handle):
                return link
        return None

    def other(self, side: Side) -> Side:
        return self.sides["b" if side.name == "a" else "a"]

    # ---- the model's results -------------------------------------------------------------
    def delivered(self, link: Link, d: rm.Delivery, at: float) -> None:
        sender = link.central if d.direction == rm.CENTRAL_TO_PERIPHERAL else link.peripheral
        receiver = link.other(sender)
        if d.kind == "terminated":
            sender.hide(sender.hidden_status, OP_DISCONNECT)
            sender.to_emulator(d.item.token)
            return
        packet = d.item.token
        link.delivered[d.direction] += d.item.size
        if (sender.drops_confirmations and self.is_confirmation(link, packet)) or not self.signaling(link, sender, packet):
            # A response the radio hides (the requester never learns the channel closed), or a
            # confirmation lost on purpose (a central that never confirms an indication).
            sender.send(bytes([EVT, 0x13, 5, 1]) + put16(link.handle_on(sender)) + put16(1), at)
            return
        flags = le16(packet, 1) & 0xF000
        handle = link.handle_on(receiver)
        receiver.send(bytes([ACL]) + put16(handle | flags) + packet[3:], at)
        sender.send(bytes([EVT, 0x13, 5, 1]) + put16(link.handle_on(sender)) + put16(1), at)

    def signaling(self, link: Link, sender: Side, packet: bytes) -> bool:
        """Follows the LE signaling channel for Enhanced ATT's channels; False for a packet that
        must not reach the other host (the answer to a reset the radio made up)."""
        flags = le16(packet, 1) & 0x3000
        if flags not in (0x0000, 0x2000) or len(packet) < 13 or le16(packet, 7) != 0x0005:
            return True
        code, ident = packet[9], packet[10]
        body = packet[13:]
        central = sender is link.central
        # Linux opens Enhanced ATT's bearers as LE credit-based channels (0x14/0x15), newer stacks
        # as enhanced credit-based ones (0x17/0x18, several CIDs at once).
        if code == 0x14 and len(body) >= 10 and le16(body, 0) == 0x0027:
            link.eatt_requests[(sender.name, ident)] = [le16(body, 2)]
        elif code == 0x17 and len(body) >= 10 and le16(body, 0) == 0x0027:
            link.eatt_requests[(sender.name, ident)] = [le16(body, i) for i in range(8, len(body) - 1, 2)]
        elif code in (0x15, 0x18) and len(body) >= 8:
            requester = link.other(sender).name
            scids = link.eatt_requests.pop((requester, ident), None)
            if scids is not None:
                dcids = ([le16(body, 0)] if code == 0x15 and le16(body, 8) == 0
                         else [le16(body, i) for i in range(8, len(body) - 1, 2)] if code == 0x18 else [])
                for scid, dcid in zip(scids, dcids):
                    if dcid:
                        link.eatt.append((dcid, scid) if central else (scid, dcid))
                log(f"link {link.c_handle}/{link.p_handle}: Enhanced ATT channels {link.eatt}")
        elif code == 0x07 and (sender.name, ident) in link.hidden_responses:  # disconnection response
            link.hidden_responses.discard((sender.name, ident))
            return False
        return True

    @staticmethod
    def is_confirmation(link: Link, packet: bytes) -> bool:
        """An ATT Handle Value Confirmation, on the fixed ATT channel or an Enhanced ATT one
        (whose first frame carries the SDU's length before the PDU)."""
        if len(packet) < 10 or le16(packet, 1) & 0x3000 not in (0x0000, 0x2000):
            return False
        cid = le16(packet, 7)
        if cid == 0x0004:
            return packet[9] == 0x1E
        eatt = {c for pair in link.eatt for c in pair}
        return cid in eatt and len(packet) >= 12 and packet[11] == 0x1E

    def reset_eatt(self, name: str) -> str:
        """One Enhanced ATT channel ends for `name`'s host alone, as a bearer that failed: its
        host gets a disconnection request as if from the peer, whose host never hears of it
        and goes on using the channel (what it sends there is dropped by the kernel)."""
        side = self.sides[name]
        link = next((l for l in self.links if side in (l.central, l.peripheral) and l.eatt), None)
        if link is None:
            return "error no link with an Enhanced ATT channel"
        c_cid, p_cid = link.eatt.pop(0)
        mine, theirs = (c_cid, p_cid) if side is link.central else (p_cid, c_cid)
        ident = 0xF0
        signal = bytes([0x06, ident]) + put16(4) + put16(mine) + put16(theirs)
        l2cap = put16(len(signal)) + put16(0x0005) + signal
        side.send(bytes([ACL]) + put16(link.handle_on(side) | 0x2000) + put16(len(l2cap)) + l2cap)
        link.hidden_responses.add((side.name, ident))
        log(f"{name}: Enhanced ATT channel {mine} reset (the peer keeps {theirs})")
        return f"ok reset channel {mine} of {name}"

    def supervision_timeout(self, link: Link) -> None:
        log(f"link {link.c_handle}/{link.p_handle}: nothing heard for "
            f"{link.settings.timeout_units * 10} ms, supervision timeout")
        self.end_link(link, 0x08)

    def end_link(self, link: Link, reason: int) -> None:
        """End a link on both sides as a lost radio does: each host sees `reason`."""
        self.forget(link)
        c = link.central
        c.timed_out.add(link.c_handle)
        link.peripheral.timed_out.add(link.p_handle)
        c.hide(c.hidden_status, OP_DISCONNECT)
        c.to_emulator(bytes([CMD]) + put16(OP_DISCONNECT) + bytes([3]) + put16(link.c_handle) + bytes([0x13]))

    # ---- from a host -----------------------------------------------------------------------
    def from_host(self, side: Side, packet: bytes) -> None:
        kind = packet[0]
        if kind == ACL and self.profile.timed:
            self.acl_from_host(side, packet)
            return
        if kind == CMD and len(packet) >= 4:
            if self.command(side, le16(packet, 1), packet):
                return
        side.to_emulator(packet)

    def acl_from_host(self, side: Side, packet: bytes) -> None:
        handle = le16(packet, 1) & 0x0FFF
        link = self.link_of(side, handle)
        if link is None:
            if side.pending_complete and side.pending_complete[0] == handle:
                side.held_acl.setdefault(handle, []).append(packet)
            return  # a link that ended: the kernel takes its buffers back itself
        link.model.enqueue(link.direction_from(side), rm.Outgoing(len(packet) - 5, packet))
        link.schedule()

    def command(self, side: Side, opcode: int, packet: bytes) -> bool:
        """Handle one command; True when it was answered here and must not reach the emulator."""
        params = packet[4:]
        timed = self.profile.timed
        now = time.monotonic()
        if opcode == OP_RESET:
            self.host_reset(side)
            return False
        if opcode == OP_LE_CREATE_CONNECTION and len(params) >= 25:
            side.create, side.create_last, side.create_hidden_status = packet, packet, 0
            if timed:
                side.send(command_status(opcode))
                side.hide(side.hidden_status, opcode)
                self.schedule_create(side, first=True)
                return True
            side.create_forward_at = 0.0
            return False
        if opcode == OP_LE_CREATE_CONNECTION_CANCEL:
            if side.create is not None and side.create_forward_at:
                create, side.create, side.create_forward_at = side.create, None, 0.0
                side.send(command_complete(opcode, b"\x00"))
                side.send(cancelled_connection(create))
                log(f"{side.name}: connection attempt cancelled by the host")
                return True
            side.create = None
            return False
        if opcode == OP_DISCONNECT and len(params) >= 3:
            handle = le16(params, 0) & 0x0FFF
            side.host_disconnects.append(handle)
            link = self.link_of(side, handle) if timed else None
            if link is not None:
                # The terminate goes out at an event, behind what the host queued before it.
                side.send(command_status(opcode))
                link.model.enqueue(link.direction_from(side), rm.Outgoing(0, packet, control=True))
                link.schedule()
                return True
            return False
        if opcode in (OP_LE_SET_ADV_ENABLE, OP_LE_SET_EXT_ADV_ENABLE) and len(params) >= 1:
            enable = params[0] == 0x01
            if side.quiet and enable:
                side.send(command_complete(opcode, b"\x00"))
                log(f"{side.name}: quiet radio, advertising enable not passed on")
                return True
            side.adv_enabled = enable
            return False
        if opcode == OP_LE_SET_ADV_PARAMETERS and len(params) >= 4:
            side.adv_interval_units = (le16(params, 0) + le16(params, 2)) // 2
            return False
        if opcode == OP_LE_SET_SCAN_PARAMETERS and len(params) >= 5:
            side.scan_interval_units, side.scan_window_units = le16(params, 1), le16(params, 3)
            return False
        if opcode == OP_LE_SET_SCAN_ENABLE and len(params) >= 1:
            side.scan_enabled = params[0] == 0x01
            side.scan_started = now
            return False
        if opcode == OP_LE_SET_EVENT_MASK and len(params) >= 8:
            side.le_event_mask = int.from_bytes(params[:8], "little")
            return False
        if not timed:
            return False
        return self.tuning_command(side, opcode, params)

    def tuning_command(self, side: Side, opcode: int, params: bytes) -> bool:
        prof = self.profile
        if opcode == OP_LE_SET_DEFAULT_PHY and len(params) >= 3:
            all_phys, tx, rx = params[0], params[1], params[2]
            side.default_phys = (0x07 if all_phys & 1 else tx, 0x07 if all_phys & 2 else rx)
            side.send(command_complete(opcode, b"\x00"))
            return True
        if opcode == OP_LE_WRITE_DEFAULT_DATA_LENGTH and len(params) >= 4:
            tx = le16(params, 0)
            ok = rm.MIN_DATA_LENGTH <= tx <= rm.MAX_DATA_LENGTH
            if ok:
                side.suggested_tx = tx
            side.send(command_complete(opcode, b"\x00" if ok else b"\x12"))
            return True
        if opcode == OP_LE_READ_DEFAULT_DATA_LENGTH:
            tx = side.suggested_tx
            side.send(command_complete(opcode, b"\x00" + put16(tx) + put16((tx + 14) * 8)))
            return True
        if opcode == OP_LE_READ_MAX_DATA_LENGTH:
            m = prof.max_data_length
            t = (m + 14) * 8
            side.send(command_complete(opcode, b"\x00" + put16(m) + put16(t) + put16(m) + put16(t)))
            return True
        if opcode in (OP_LE_READ_PHY, OP_LE_SET_DATA_LENGTH, OP_LE_SET_PHY, OP_LE_CONNECTION_UPDATE,
                      OP_LE_CONN_PARAM_REPLY, OP_LE_CONN_PARAM_NEGATIVE_REPLY) and len(params) >= 2:
            handle = le16(params, 0) & 0x0FFF
            link = self.link_of(side, handle)
            if link is None:
                if opcode in (OP_LE_READ_PHY, OP_LE_SET_DATA_LENGTH, OP_LE_CONN_PARAM_REPLY,
                              OP_LE_CONN_PARAM_NEGATIVE_REPLY):
                    side.send(command_complete(opcode, b"\x02" + put16(handle)))
                else:
                    side.send(command_status(opcode, 0x02))
                return True
            return self.link_command(side, link, opcode, params)
        return False

    def link_command(self, side: Side, link: Link, opcode: int, params: bytes) -> bool:
        handle = link.handle_on(side)
        s = link.settings
        if opcode == OP_LE_READ_PHY:
            side.send(command_complete(opcode, b"\x00" + put16(handle) + bytes([s.phy, s.phy])))
        elif opcode == OP_LE_SET_DATA_LENGTH and len(params) >= 6:
            side.send(command_complete(opcode, b"\x00" + put16(handle)))
            wanted = max(rm.MIN_DATA_LENGTH, min(le16(params, 2), rm.MAX_DATA_LENGTH))
            self.settle_data_length(link, wanted)
        elif opcode == OP_LE_SET_PHY and len(params) >= 5:
            side.send(command_status(opcode))
            all_phys, tx, rx = params[2], params[3], params[4]
            mine = (0x07 if all_phys & 1 else tx) & (0x07 if all_phys & 2 else rx)
            peer = self.other(side).default_phys
            both = mine & peer[0] & peer[1]
            phy = rm.PHY_2M if (both & 0x02 and rm.PHY_2M in self.profile.phys) else rm.PHY_1M
            self.phy_update(link, phy, requested_by=side)
        elif opcode == OP_LE_CONNECTION_UPDATE and len(params) >= 10:
            side.send(command_status(opcode))
            lo, hi, latency, timeout = le16(params, 2), le16(params, 4), le16(params, 6), le16(params, 8)
            if side is link.central:
                self.connection_update(link, lo, hi, latency, timeout)
            else:
                self.parameter_request(link, lo, hi, latency, timeout)
        elif opcode == OP_LE_CONN_PARAM_REPLY and len(params) >= 10:
            side.send(command_complete(opcode, b"\x00" + put16(handle)))
            self.connection_update(link, le16(params, 2), le16(params, 4), le16(params, 6), le16(params, 8))
        elif opcode == OP_LE_CONN_PARAM_NEGATIVE_REPLY:
            side.send(command_complete(opcode, b"\x00" + put16(handle)))
            reason = params[2] if len(params) > 2 else 0x3B
            link.peripheral.le_event(SUB_CONN_UPDATE_COMPLETE, bytes([reason]) + put16(link.p_handle)
                                     + put16(s.interval_units) + put16(s.latency) + put16(s.timeout_units))
        return True

    # ---- procedures ------------------------------------------------------------------------
    def settle_data_length(self, link: Link, wanted_a: int = 0) -> None:
        """Both controllers agree on the largest data length both allow and the hosts asked for."""
        prof = self.profile
        if prof.negotiates_data_length:
            agreed = min(link.central.suggested_tx, link.peripheral.suggested_tx)
            length = min(prof.max_data_length, max(agreed, wanted_a))
        else:
            length = rm.MIN_DATA_LENGTH
        length = max(rm.MIN_DATA_LENGTH, length)
        if length == link.settings.data_length:
            return

        def apply(t):
            link.change_settings(t, data_length=length)
            time_us = (length + 14) * 8
            for side in (link.central, link.peripheral):
                side.le_event(SUB_DATA_LENGTH_CHANGE, put16(link.handle_on(side)) + put16(length)
                              + put16(time_us) + put16(length) + put16(time_us), t)
            log(f"link {link.c_handle}/{link.p_handle}: data length {length}")
        link.at_instant(apply, events=2)

    def phy_update(self, link: Link, phy: int, requested_by=None) -> None:
        def apply(t):
            link.change_settings(t, phy=phy)
            for side in (link.central, link.peripheral):
                if side is requested_by or phy != before:
                    side.le_event(SUB_PHY_UPDATE_COMPLETE, b"\x00" + put16(link.handle_on(side))
                                  + bytes([phy, phy]), t)
            log(f"link {link.c_handle}/{link.p_handle}: PHY {'2M' if phy == rm.PHY_2M else '1M'}")
        before = link.settings.phy
        link.at_instant(apply)

    def connection_update(self, link: Link, lo: int, hi: int, latency: int, timeout: int) -> None:
        interval = rm.choose_interval(self.profile, lo, hi)

        def apply(t):
            link.change_settings(t, interval_units=interval, latency=latency, timeout_units=timeout)
            for side in (link.central, link.peripheral):
                side.le_event(SUB_CONN_UPDATE_COMPLETE, b"\x00" + put16(link.handle_on(side))
                              + put16(interval) + put16(latency) + put16(timeout), t)
            log(f"link {link.c_handle}/{link.p_handle}: interval {interval * 1.25:g} ms, "
                f"latency {latency}, timeout {timeout * 10} ms")
        link.at_instant(apply)

    def parameter_request(self, link: Link, lo: int, hi: int, latency: int, timeout: int) -> None:
        """A peripheral's request: the central's host decides when it asked to see these."""
        c = link.central
        if c.le_event_mask & (1 << (SUB_CONN_PARAM_REQUEST - 1)):
            c.le_event(SUB_CONN_PARAM_REQUEST, put16(link.c_handle) + put16(lo) + put16(hi)
                       + put16(latency) + put16(timeout))
        else:
            self.connection_update(link, lo, hi, latency, timeout)

    def schedule_create(self, side: Side, first: bool = False) -> None:
        """The host's LE Create Connection reaches the emulator when the initiator would hear
        the advertiser: at its next advertising event inside the initiator's scan window."""
        create = side.create
        peer = self.other(side)
        if self.cut or not peer.adv_enabled or not self.profile.timed:
            delay = self.args.retry_connect_ms / 1000.0
        else:
            scan_interval, scan_window = le16(create, 4) * 625, le16(create, 6) * 625
            delay = rm.discovery_delay_us(self.rng, peer.adv_interval_units * 625, scan_interval,
                                          scan_window, 0, self.profile.loss) / 1e6
        side.create_forward_at = time.monotonic() + delay

    def forward_create(self, side: Side) -> None:
        side.create_forward_at = 0.0
        if side.create is None:
            return
        if self.cut:
            self.schedule_create(side)
            return
        if self.profile.timed:
            self.forming = None
        side.create_hidden_status += 1
        side.to_emulator(side.create)

    def host_reset(self, side: Side) -> None:
        """End each of the host's links before its Reset reaches the emulator, as a radio would."""
        if side.quiet:
            side.quiet = False
            log(f"{side.name}: host reset, radio no longer quiet")
        for link in [l for l in self.links if side in (l.central, l.peripheral)]:
            self.forget(link)
        if side.handles:
            log(f"{side.name}: reset, ending {len(side.handles)} connection(s) first")
            for h in sorted(side.handles):
                side.to_emulator(bytes([CMD]) + put16(OP_DISCONNECT) + bytes([3]) + put16(h) + bytes([0x08]))
                side.hide(side.hidden_status, OP_DISCONNECT)
                side.hidden_disconnects.add(h)
        quiet = side.quiet
        hidden_disconnects, hidden_status = side.hidden_disconnects, side.hidden_status
        side.reset_state()
        side.quiet = quiet
        side.hidden_disconnects, side.hidden_status = hidden_disconnects, hidden_status

    # ---- from the emulator -----------------------------------------------------------------
    def from_emulator(self, side: Side, packet: bytes) -> None:
        now = time.monotonic()
        if packet[0] != EVT:
            if packet[0] == ACL and self.profile.timed:
                return  # data goes through the model, not the emulator
            side.send(packet)
            return
        code = packet[1]
        if code == 0x3E and len(packet) > 4:
            self.le_meta_from_emulator(side, packet, now)
            return
        if code == 0x13 and self.profile.timed:
            return  # the model reports completed packets itself
        if code == 0x05 and len(packet) >= 7:
            packet = self.disconnection(side, packet)
        elif code == 0x0E and len(packet) >= 6:
            opcode = le16(packet, 4)
            if side.take_hidden(side.hidden_complete, opcode):
                return
            packet = self.rewrite_complete(side, opcode, packet)
        elif code == 0x0F and len(packet) >= 7:
            opcode = le16(packet, 5)
            if opcode == OP_LE_CREATE_CONNECTION and side.create_hidden_status > 0:
                side.create_hidden_status -= 1
                return
            if side.take_hidden(side.hidden_status, opcode) or side.take_hidden(side.hidden_complete, opcode):
                return
        if packet is not None:
            side.send(packet)

    def rewrite_complete(self, side: Side, opcode: int, packet: bytes) -> bytes:
        p = bytearray(packet)
        if opcode == OP_READ_BD_ADDR and len(p) >= 13:
            side.address = bytes(p[7:13])
        if not self.profile.timed or len(p) < 7 or p[6] != 0:
            return packet
        prof = self.profile
        if opcode == OP_READ_LOCAL_COMMANDS and len(p) >= 7 + 64:
            for key, bits in TUNING_COMMAND_BITS.items():
                wanted = prof.max_data_length > rm.MIN_DATA_LENGTH if key == "data_length" else True
                for octet, mask in bits:
                    p[7 + octet] = (p[7 + octet] | mask) if wanted else (p[7 + octet] & ~mask)
        elif opcode == OP_LE_READ_FEATURES and len(p) >= 15:
            self.rewrite_features(p, 7)
        elif opcode in (OP_LE_READ_BUFFER_SIZE, OP_LE_READ_BUFFER_SIZE_V2) and len(p) >= 10:
            p[7:9] = put16(prof.acl_length)
            p[9] = prof.acl_buffers
        return bytes(p)

    def rewrite_features(self, p: bytearray, at: int) -> None:
        prof = self.profile

        def setbit(bit, on):
            octet, mask = bit
            p[at + octet] = (p[at + octet] | mask) if on else (p[at + octet] & ~mask)
        setbit(LE_FEATURE_DATA_LENGTH, prof.max_data_length > rm.MIN_DATA_LENGTH)
        setbit(LE_FEATURE_2M, rm.PHY_2M in prof.phys)
        setbit(LE_FEATURE_CODED, False)
        setbit(LE_FEATURE_CONN_PARAM_REQUEST, True)

    def disconnection(self, side: Side, packet: bytes):
        handle = le16(packet, 4) & 0x0FFF
        if packet[3] == 0x02 and handle == 0 and side.host_disconnects:
            handle = side.host_disconnects.pop(0)
            log(f"{side.name}: disconnection of unknown link {handle} reported as ended")
            side.handles.discard(handle)
            self.drop_link(side, handle)
            return bytes([EVT, 0x05, 0x04, 0x00]) + put16(handle) + bytes([0x16])
        if handle in side.host_disconnects:
            side.host_disconnects.remove(handle)
        self.drop_link(side, handle)
        if handle in side.hidden_disconnects:
            side.hidden_disconnects.discard(handle)
            return None
        side.handles.discard(handle)
        p = bytearray(packet)
        if self.cut or handle in side.timed_out:
            side.timed_out.discard(handle)
            p[6] = 0x08  # Connection Timeout
        log(f"{side.name}: disconnection of {handle}, reason 0x{p[6]:02x}")
        return bytes(p)

    def drop_link(self, side: Side, handle: int) -> None:
        link = self.link_of(side, handle)
        if link is not None:
            self.forget(link)
        side.held_acl.pop(handle, None)
        if side.pending_complete and side.pending_complete[0] == handle:
            side.pending_complete = None

    def le_meta_from_emulator(self, side: Side, packet: bytes, now: float) -> None:
        sub = packet[3]
        if sub in ADV_REPORT_SUBEVENTS:
            self.advertising_report(side, packet, now)
            return
        if sub == 0x01 and packet[4] == 0x3E and side.create is not None:
            # Failed at once: a real initiator would still be listening for the peer.
            log(f"{side.name}: peer not advertising yet; initiating goes on")
            self.schedule_create(side)
            return
        if sub in (0x01, 0x0A):
            side.create, side.create_forward_at = None, 0.0
            if packet[4] == 0 and len(packet) > 7:
                packet = self.connection_complete(side, packet)
        elif sub == SUB_REMOTE_FEATURES and self.profile.timed and len(packet) >= 15 and packet[4] == 0:
            p = bytearray(packet)
            self.rewrite_features(p, 7)
            packet = bytes(p)
        side.send(packet)

    def advertising_report(self, side: Side, packet: bytes, now: float) -> None:
        if self.cut:
            return
        packet = with_rssi(packet)
        prof = self.profile
        if not prof.timed:
            side.send(packet, now + prof.fixed_report_delay_us / 1e6)
            return
        scan_response = packet[3] == 0x02 and len(packet) > 5 and packet[5] == 0x04
        if scan_response and side.pending_report_at > now:
            at = side.pending_report_at + 0.0005
        else:
            peer = self.other(side)
            delay = rm.discovery_delay_us(
                self.rng, peer.adv_interval_units * 625, side.scan_interval_units * 625,
                side.scan_window_units * 625, int((now - side.scan_started) * 1e6), prof.loss,
                prof.adv_delay_max_us)
            at = now + delay / 1e6
        side.pending_report_at = at

        def release():
            # A report comes only while the host scans, and not after a cut.
            if side.scan_enabled and not self.cut:
                side.send(packet)
        self.timers.at(at, release)

    def connection_complete(self, side: Side, packet: bytes) -> bytes:
        handle = le16(packet, 5) & 0x0FFF
        role = packet[7]
        side.handles.add(handle)
        if role == 1:
            side.adv_enabled = False  # a connectable advertisement ends when it is answered
        log(f"{side.name}: connection {handle} ({'central' if role == 0 else 'peripheral'})")
        if not self.profile.timed:
            return packet
        if self.forming is None:
            central = side if role == 0 else self.other(side)
            create = central.create_last if central.create is None else central.create
            lo, hi = (le16(create, 17), le16(create, 19)) if create else (24, 40)
            latency, timeout = (le16(create, 21), le16(create, 23)) if create else (0, 42)
            self.forming = rm.LinkSettings(interval_units=rm.choose_interval(self.profile, lo, hi),
                                           latency=latency, timeout_units=timeout,
                                           phy=rm.PHY_2M if self.profile.name == "tuned" else rm.PHY_1M,
                                           data_length=(rm.MAX_DATA_LENGTH if self.profile.name == "tuned"
                                                        else rm.MIN_DATA_LENGTH))
        s = self.forming
        p = bytearray(packet)
        at = 15 if packet[3] == 0x01 else 27
        p[at:at + 2], p[at + 2:at + 4], p[at + 4:at + 6] = put16(s.interval_units), put16(s.latency), put16(s.timeout_units)
        side.pending_complete = (handle, role)
        other = self.other(side)
        if other.pending_complete and other.pending_complete[1] != role:
            c, p_side = (side, other) if role == 0 else (other, side)
            link = Link(self, c, c.pending_complete[0], p_side, p_side.pending_complete[0], s)
            self.links.append(link)
            self.forming = None
            for s_ in (c, p_side):
                held = s_.held_acl.pop(s_.pending_complete[0], [])
                s_.pending_complete = None
                for acl in held:
                    link.model.enqueue(link.direction_from(s_), rm.Outgoing(len(acl) - 5, acl))
            log(f"link {link.c_handle}/{link.p_handle}: {s.describe()}, latency {s.latency}, "
                f"timeout {s.timeout_units * 10} ms (central {c.name})")
            self.after_connect(link)
            link.schedule()
        return bytes(p)

    def after_connect(self, link: Link) -> None:
        """What the controllers do by themselves once connected: agree on the data length, and
        move to 2M when both hosts' default PHYs allow it."""
        self.settle_data_length(link)
        prof = self.profile
        if prof.follows_default_phy and rm.PHY_2M in prof.phys and link.settings.phy != rm.PHY_2M:
            prefs = link.central.default_phys + link.peripheral.default_phys
            if all(p & 0x02 for p in prefs):
                self.phy_update(link, rm.PHY_2M)

    # ---- control ---------------------------------------------------------------------------
    def control_command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "error empty command"
        cmd, rest = words[0], words[1:]
        try:
            if cmd == "attach" and rest:
                return self.attach(rest[0], rest[1] if len(rest) > 1 else None)
            if cmd == "detach" and rest:
                return self.detach(rest[0])
            if cmd == "cut":
                self.cut = True
                if self.profile.timed:
                    for link in self.links:
                        link.model.cut = True
                        link.schedule()
                else:
                    self.pending_cut = time.monotonic() + 0.3
                log("radio cut")
                return "ok cut"
            if cmd == "restore":
                self.cut, self.pending_cut = False, 0.0
                for link in self.links:
                    link.model.cut = False
                log("radio restored")
                return "ok restored"
            if cmd == "quiet" and rest:
                self.quiet(self.sides[rest[0]])
                return "ok quiet"
            if cmd == "normal" and rest:
                self.sides[rest[0]].quiet = False
                return "ok normal"
            if cmd == "profile" and rest:
                if rest[0] not in rm.PROFILES:
                    return f"error unknown profile {rest[0]} (known: {', '.join(rm.PROFILES)})"
                self.profile = rm.PROFILES[rest[0]]
                for link in list(self.links):
                    link.model.profile = self.profile
                log(f"profile {self.profile.name}")
                return f"ok profile {self.profile.name}"
            if cmd == "loss" and rest:
                # The air gets worse (or better) from now on, on every link: the edge of range.
                loss = float(rest[0])
                on_1m = float(rest[1]) if len(rest) > 1 else 1.0
                if not 0.0 <= loss < 1.0 or not 0.0 <= on_1m <= 1.0:
                    return "error loss must be in [0, 1), its share on 1M in [0, 1]"
                self.profile = rm.with_profile(self.profile, loss=loss, loss_on_1m=on_1m)
                for link in self.links:
                    link.model.profile = self.profile
                log(f"packet loss now {loss:g}")
                return f"ok loss {loss:g}"
            if cmd == "drop-confirmations" and len(rest) == 2:
                self.sides[rest[0]].drops_confirmations = rest[1] == "on"
                log(f"{rest[0]}: ATT confirmations {'dropped' if rest[1] == 'on' else 'carried'}")
                return f"ok drop-confirmations {rest[0]} {rest[1]}"
            if cmd == "reset-eatt" and rest:
                return self.reset_eatt(rest[0])
            if cmd == "status":
                return json.dumps(self.status())
        except (OSError, KeyError, ValueError) as e:
            return f"error {e}"
        return f"error unknown command {line.strip()!r}"

    def status(self) -> dict:
        links = []
        for link in self.links:
            s = link.settings
            links.append({"central": link.central.name, "peripheral": link.peripheral.name,
                          "phy": "2M" if s.phy == rm.PHY_2M else "1M",
                          "interval_ms": s.interval_units * 1.25, "latency": s.latency,
                          "timeout_ms": s.timeout_units * 10, "data_length": s.data_length,
                          "events": link.model.events, "exchanges": link.model.exchanges,
                          "lost": link.model.lost, "bytes": link.delivered})
        return {"profile": self.profile.name, "timed": self.profile.timed, "cut": self.cut,
                "sides": {n: {"attached": s.emu is not None, "quiet": s.quiet} for n, s in self.sides.items()},
                "links": links}

    def quiet(self, side: Side) -> None:
        side.quiet = True
        for command in (bytes([CMD, 0x0A, 0x20, 0x01, 0x00]),
                        bytes([CMD, 0x39, 0x20, 0x02, 0x00, 0x00])):
            side.hide(side.hidden_complete, le16(command, 1))
            side.to_emulator(command)
        side.adv_enabled = False
        log(f"{side.name}: quiet radio: advertising off")

    # ---- loop ------------------------------------------------------------------------------
    def start_control(self) -> None:
        path = self.args.control
        if os.path.lexists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(8)
        sock.setblocking(False)
        self.control = sock
        self.sel.register(sock, selectors.EVENT_READ, ("control", None))

    def serve_control(self) -> None:
        try:
            conn, _ = self.control.accept()
        except BlockingIOError:
            return
        conn.settimeout(2)
        try:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            reply = self.control_command(data.decode("utf-8", "replace"))
            conn.sendall(reply.encode() + b"\n")
        except OSError:
            pass
        finally:
            conn.close()

    def read_ready(self, what: str, side: Side) -> None:
        if what == "host":
            try:
                data = os.read(side.transport, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                time.sleep(0.05)  # btattach went away (pty) or the port closed; wait for the next
                return
            packets, side.from_host = split_packets(side.from_host + data)
            for packet in packets:
                self.from_host(side, packet)
        else:
            try:
                data = side.emu.recv(65536)
            except OSError:
                data = b""
            if not data:
                log(f"{side.name}: the emulator closed the connection")
                self.sel.unregister(side.emu)
                side.emu.close()
                side.emu = None
                return
            packets, side.from_emu = split_packets(side.from_emu + data)
            for packet in packets:
                self.from_emulator(side, packet)

    def flush(self, now: float) -> None:
        for side in self.sides.values():
            while side.out and side.out[0][0] <= now:
                packet = side.out.popleft()[1]
                if side.transport is not None:
                    write_all(side.transport, packet)

    def next_wake(self, now: float) -> float:
        times = [now + 0.2]
        t = self.timers.next_time()
        if t is not None:
            times.append(t)
        for side in self.sides.values():
            if side.out:
                times.append(side.out[0][0])
            if side.create_forward_at:
                times.append(side.create_forward_at)
        if self.pending_cut:
            times.append(self.pending_cut)
        return max(0.0, min(times) - now)

    def run(self) -> int:
        self.start_control()
        if self.args.attach:
            for name in self.args.attach.split(","):
                self.attach(name)
        log(f"profile {self.profile.name}: {self.profile.summary}; control {self.args.control}")
        while True:
            now = time.monotonic()
            if self.pending_cut and now >= self.pending_cut:
                self.pending_cut = 0.0
                for side in self.sides.values():
                    for h in sorted(side.handles):
                        side.to_emulator(bytes([CMD]) + put16(OP_DISCONNECT) + bytes([3]) + put16(h) + bytes([0x13]))
                        side.hide(side.hidden_status, OP_DISCONNECT)
                log("radio cut: links dropped")
            for side in self.sides.values():
                if side.create_forward_at and now >= side.create_forward_at:
                    self.forward_create(side)
            self.timers.run_due(now)
            self.flush(now)
            try:
                ready = self.sel.select(self.next_wake(time.monotonic()))
            except InterruptedError:
                continue
            for key, _ in ready:
                what, side = key.data
                if what == "control":
                    self.serve_control()
                else:
                    self.read_ready(what, side)
            self.flush(time.monotonic())


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.0005)
            continue
        except OSError:
            return
        view = view[n:]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="/tmp/bt-server-bredrle", help="btvirt server socket")
    p.add_argument("--pty-link", default="/run/lab/ttyBT", help="symlink to side a's pty (for btattach)")
    p.add_argument("--device", help="side b's character device carrying H4 (virtio console port)")
    p.add_argument("--control", default="/run/lab/radio.sock", help="control socket")
    p.add_argument("--profile", default=os.environ.get("LAB_LINK") or rm.DEFAULT_PROFILE,
                   choices=sorted(rm.PROFILES))
    p.add_argument("--attach", help="sides to attach at start, e.g. a,b")
    p.add_argument("--retry-connect-ms", type=float, default=100)
    p.add_argument("--seed", type=int, default=int(time.time()))
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(Radio(parse_args()).run())
    except KeyboardInterrupt:
        sys.exit(0)
