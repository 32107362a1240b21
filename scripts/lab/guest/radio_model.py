"""The lab's radio: link-layer timing of Bluetooth LE, as pure functions and values (no I/O,
no clock of its own). `hci_radio.py` drives it with the packets both hosts send; the tests in
scripts/lab/tests/ check it against published figures.

What it models (Bluetooth Core Specification v5.3, Vol 6, Part B):
- Packet airtime. A data packet on LE 1M is 1 (preamble) + 4 (access address) + 2 (header)
  + payload + 3 (CRC) bytes at 8 µs a byte; on LE 2M the preamble is 2 bytes and a byte takes
  4 µs. An empty packet carries no payload. T_IFS, the gap between two packets, is 150 µs.
- Connection events. The central speaks first at each event (the anchor, every connection
  interval), the peripheral answers 150 µs after the central's packet ends, and the event goes on
  while either side has more data, the event's time allows another exchange, and the
  controller's own limit of packets per event is not reached. A reply therefore waits for a
  later event whenever the event closed before it was ready.
- Data length. Each link-layer packet carries at most the data length of its direction (27
  bytes until both controllers agreed on more, at most 251), so an ACL packet of 251 bytes on a
  27-byte link is 10 packets.
- Loss. Each packet is lost with the profile's probability; a data packet whose
  acknowledgement did not arrive goes again in a later exchange.

A profile is what a pair of controllers (and the air between them) does; the hosts' own
requests (interval, PHY, data length) are what the hosts ask through HCI, answered as the
profile's controllers would.
"""
from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Optional

T_IFS_US = 150
PHY_1M, PHY_2M = 1, 2
# Bytes of a packet besides its payload (preamble, access address, header, CRC), and
# microseconds a byte takes, for each PHY.
PACKET_OVERHEAD = {PHY_1M: 10, PHY_2M: 11}
US_PER_BYTE = {PHY_1M: 8, PHY_2M: 4}
MIN_DATA_LENGTH, MAX_DATA_LENGTH = 27, 251
L2CAP_HEADER = 4        # length + channel id, before every PDU
ATT_NOTIFICATION_HEADER = 3  # opcode + handle


def packet_us(phy: int, payload: int) -> int:
    """Airtime of one link-layer data packet with `payload` bytes (0: an empty packet)."""
    return (PACKET_OVERHEAD[phy] + payload) * US_PER_BYTE[phy]


def exchange_us(phy_out: int, out_bytes: int, phy_back: int, back_bytes: int) -> int:
    """One exchange: a packet, T_IFS, the other side's packet, T_IFS."""
    return packet_us(phy_out, out_bytes) + T_IFS_US + packet_us(phy_back, back_bytes) + T_IFS_US


def fragments(pdu_bytes: int, data_length: int) -> list:
    """The link-layer payloads an ACL packet of `pdu_bytes` is cut into."""
    whole, rest = divmod(pdu_bytes, data_length)
    return [data_length] * whole + ([rest] if rest else [])


def interval_units_to_us(units: int) -> int:
    return units * 1250


@dataclass(frozen=True)
class Profile:
    """What a pair of controllers and the air between them do. Every number has its source in
    the comment of the profile that sets it (PROFILES below)."""
    name: str
    summary: str
    # None: BlueZ's emulator as it is (no timing at all); the fields below are then unused.
    timed: bool = True
    phys: frozenset = frozenset({PHY_1M, PHY_2M})
    max_data_length: int = MAX_DATA_LENGTH
    # The controller agrees on the largest data length both allow as soon as the link is up
    # (the kernel writes the controller's maximum as its suggested default at power-on).
    negotiates_data_length: bool = True
    # The controller moves a new link to 2M by itself when both hosts' default PHYs allow it.
    follows_default_phy: bool = True
    # LE Read Buffer Size: bytes per ACL packet, packets the controller holds.
    acl_length: int = 251
    acl_buffers: int = 8
    # Packets each direction may carry in one connection event (None: as many as fit).
    packets_per_event: Optional[int] = 4
    # Which interval the central's controller takes from the host's [min, max]: "max", "min",
    # or a fixed number of 1.25 ms units (the link as if both hosts had asked for it).
    interval_choice: object = "max"
    min_interval_units: int = 6      # 7.5 ms, the smallest the specification allows
    loss: float = 0.0                # probability that one packet is lost (on 2M, if it applies)
    # The share of that loss on 1M: at the edge of range 2M, with a few dB less sensitivity
    # than 1M on real radios (about -93 against -97 dBm), loses packets that 1M still carries.
    loss_on_1m: float = 1.0
    # Advertising and scanning: every advertising event lands somewhere in [0, 10 ms) after
    # its interval (advDelay); the report reaches the host once an advertising event falls in
    # one of the scanner's windows and is not lost.
    adv_delay_max_us: int = 10_000
    # The instant profile's fixed delay of advertising reports (see hci_radio.py).
    fixed_report_delay_us: int = 40_000
    # What the ceiling would be if the lab's guests could carry it; above this, the profile says
    # in one line that the lab cannot show it (None: carried).
    beyond_lab: Optional[str] = None
    sources: tuple = ()


PROFILES = {
    # BlueZ's controller emulator as it is (emulator/btdev.c, 5.66): one LE buffer of 192 bytes
    # (acl_mtu = 192, acl_max_pkt = 1), Number of Completed Packets as soon as it has a packet,
    # no connection events, no PHY, no data length, no loss. The relay only delays advertising
    # reports by 40 ms and fills in an RSSI.
    "instant": Profile(
        name="instant", timed=False, acl_length=192, acl_buffers=1,
        summary="BlueZ's emulator as is: every packet delivered at once (no radio)",
        sources=("bluez emulator/btdev.c: acl_mtu 192, acl_max_pkt 1",)),
    # Two Linux hosts with nothing tuned and typical controllers (Intel AX2xx / Realtek USB
    # class): the kernel asks for a 30-50 ms interval (le_conn_min_interval 0x0018,
    # le_conn_max_interval 0x0028) and a 420 ms supervision timeout, and writes its
    # controller's largest data length as the suggested default; Debian's 6.1 kernel sets the
    # default PHYs to 1M only (LE Set Default PHY, seen in the lab's btmon). The controller takes
    # the host's maximum interval, agrees on 251-byte packets at once, moves to 2M only when
    # both hosts' default PHYs allow it, and sends 2 packets per event: a Linux host with a
    # controller on 2M, 7.5 ms and 251 bytes reached about 550 kbps (zephyr#20153), 2.1 packets
    # of 244 bytes each 7.5 ms event. It accepts intervals down to 15 ms, the floor Apple's
    # accessory guidelines set for peers: its best link (2M, 15 ms) carries 33 kB/s, which the
    # lab's emulated CPUs can show; at 7.5 ms it would be 66 kB/s, about what they carry at all.
    "linux-default": Profile(
        name="linux-default", packets_per_event=2, min_interval_units=12,
        summary="Linux defaults: 1M, host's max interval (50 ms), 251 B negotiated, 2 packets/event",
        sources=("Linux net/bluetooth: le_conn_min_interval 0x0018, le_conn_max_interval 0x0028, "
                 "le_supv_timeout 0x002a",
                 "Apple Accessory Design Guidelines: connection interval at least 15 ms",
                 "zephyr#20153: ~550 kbps, Linux host, 2M, 251 B, 7.5 ms")),
    # Two controllers whose hosts are tuned (nRF52 class): 2M, 7.5 ms, 251-byte packets, events
    # that fill the interval. Nordic's throughput sample measures about 1.36 Mbps there (1M with
    # long events: just under 800 kbps).
    "tuned": Profile(
        name="tuned", packets_per_event=None, interval_choice=6,
        summary="a tuned pair: 2M, 7.5 ms, 251 B, events that fill the interval",
        beyond_lab="its ceiling (about 165 kB/s) is above what the lab's emulated CPUs carry",
        sources=("Nordic nRF Connect SDK throughput sample: ~1.36 Mbps on 2M with 251 B PDUs",)),
    # A Raspberry Pi 4 class controller (CYW43455 over UART): one packet each way per event,
    # 1M only, 251 bytes. Two Pi 4s moved 6.4-7.2 kB/s with bluer's l2cat (bluer PR #173): one
    # 247-byte PDU every 34-39 ms, inside the kernel's 30-50 ms; the lab takes the host's
    # maximum (50 ms, 4.9 kB/s), the slowest link bletransfer claims to support.
    "rpi": Profile(
        name="rpi", phys=frozenset({PHY_1M}), packets_per_event=1, acl_buffers=8,
        summary="Raspberry-Pi class: 1 packet/event, 1M only, 251 B, host's max interval (50 ms)",
        sources=("bluer PR #173: 6.4-7.2 kB/s between two Raspberry Pi 4 (l2cat)",)),
    # The edge of range, or a peer without data length extension: 27-byte packets, 1M only,
    # 4 packets per event, one packet in ten lost.
    "far": Profile(
        name="far", phys=frozenset({PHY_1M}), max_data_length=MIN_DATA_LENGTH,
        negotiates_data_length=False, packets_per_event=4, loss=0.10,
        summary="a far link: 1M, 27 B packets, 4 packets/event, 10 % packet loss",
        sources=("Core 5.3 Vol 6 Part B 4.5.10: 27 B until data length extension",
                 "bleak writing 20-byte values without response: about 5 kB/s")),
}
DEFAULT_PROFILE = "linux-default"


# ---- ceilings (what a one-way flood can reach) ---------------------------------------------
def event_budget_us(interval_us: int) -> int:
    """Time an event may take: the interval, less the gap before the next anchor."""
    return interval_us - T_IFS_US


def ceiling_bytes_per_s(phy: int, data_length: int, interval_us: int,
                        packets_per_event: Optional[int], loss: float = 0.0,
                        pdu_bytes: int = MAX_DATA_LENGTH,
                        payload_per_pdu: int = MAX_DATA_LENGTH - L2CAP_HEADER) -> float:
    """Payload bytes a second of a one-way flood whose PDUs are `pdu_bytes` on the link (L2CAP
    header included) and carry `payload_per_pdu` bytes of payload. The receiver answers each
    packet with an empty one; a packet counts once both it and its acknowledgement arrived."""
    sizes = fragments(pdu_bytes, min(data_length, MAX_DATA_LENGTH))
    per_pdu_us = sum(exchange_us(phy, s, phy, 0) for s in sizes)
    mean_us = per_pdu_us / len(sizes)
    fit = max(1, int(event_budget_us(interval_us) // mean_us))
    per_event = fit if packets_per_event is None else min(fit, packets_per_event)
    # A lost reply closes the event (the central missed it), so the k-th exchange of an event
    # happens only when the k-1 replies before it arrived; each exchange delivers when both of
    # its packets arrived.
    exchanges = sum((1.0 - loss) ** k for k in range(per_event))
    delivered = exchanges * (1.0 - loss) ** 2
    return delivered * payload_per_pdu / len(sizes) * 1e6 / interval_us


def channel_ceiling(phy: int, data_length: int, interval_us: int, packets_per_event, loss=0.0,
                    acl_length: int = 251) -> float:
    """An LE credit-based channel's flood: the kernel sizes its MPS so that a PDU fills one ACL
    packet (MPS = ACL length − 4), each PDU carrying MPS bytes of the SDU."""
    return ceiling_bytes_per_s(phy, data_length, interval_us, packets_per_event, loss,
                               pdu_bytes=acl_length, payload_per_pdu=acl_length - L2CAP_HEADER)


def notification_ceiling(phy: int, data_length: int, interval_us: int, packets_per_event,
                         loss=0.0, value_length: int = 244) -> float:
    """GATT notifications of `value_length` bytes, each one ATT PDU."""
    pdu = value_length + ATT_NOTIFICATION_HEADER + L2CAP_HEADER
    return ceiling_bytes_per_s(phy, data_length, interval_us, packets_per_event, loss,
                               pdu_bytes=pdu, payload_per_pdu=value_length)


@dataclass(frozen=True)
class LinkSettings:
    """What a link runs at: the outcome of the hosts' requests and the controllers."""
    phy: int = PHY_1M
    data_length: int = MIN_DATA_LENGTH
    interval_units: int = 40
    latency: int = 0
    timeout_units: int = 42   # 10 ms units

    @property
    def interval_us(self) -> int:
        return interval_units_to_us(self.interval_units)

    def describe(self) -> str:
        phy = "2M" if self.phy == PHY_2M else "1M"
        return f"{phy} · {self.interval_units * 1.25:g} ms · {self.data_length} B"


def choose_interval(profile: Profile, host_min: int, host_max: int) -> int:
    """The interval (1.25 ms units) the central's controller takes from the host's range."""
    if isinstance(profile.interval_choice, int):
        return max(profile.interval_choice, profile.min_interval_units)
    lo, hi = max(host_min, profile.min_interval_units), max(host_max, profile.min_interval_units)
    return lo if profile.interval_choice == "min" else max(lo, hi)


def settled_link(profile: Profile, host_max_interval: int = 40, both_default_2m: bool = False,
                 data_length_both: int = MAX_DATA_LENGTH) -> LinkSettings:
    """The link two stock hosts end up on under `profile` once its controllers settled it (for
    ceilings printed beside measured figures)."""
    interval = choose_interval(profile, 24, host_max_interval)
    phy = PHY_2M if (PHY_2M in profile.phys and (both_default_2m or profile.name == "tuned")) else PHY_1M
    dl = min(profile.max_data_length, data_length_both) if profile.negotiates_data_length else MIN_DATA_LENGTH
    return LinkSettings(phy=phy, data_length=dl, interval_units=interval)


def profile_channel_ceiling(profile: Profile, link: Optional[LinkSettings] = None) -> float:
    link = link or settled_link(profile)
    return channel_ceiling(link.phy, link.data_length, link.interval_us, profile.packets_per_event,
                           profile.loss, profile.acl_length)


def profile_notification_ceiling(profile: Profile, value_length: int = 244,
                                 link: Optional[LinkSettings] = None) -> float:
    link = link or settled_link(profile)
    return notification_ceiling(link.phy, link.data_length, link.interval_us,
                                profile.packets_per_event, profile.loss, value_length)


# What a tuned host asks for (bletransfer's AdapterLinkTarget.tuned): 7.5-15 ms, since many
# controllers refuse 7.5 ms alone.
TUNED_HOST_INTERVAL = (6, 12)


def best_link(profile: Profile, host_interval: tuple = TUNED_HOST_INTERVAL) -> LinkSettings:
    """The fastest link both of the profile's controllers allow when both hosts ask for
    `host_interval`: the controller still picks within that range as it does for any request
    (the rpi profile takes its maximum, 15 ms)."""
    phy = PHY_2M if PHY_2M in profile.phys else PHY_1M
    dl = profile.max_data_length
    interval = choose_interval(profile, *host_interval)
    return LinkSettings(phy=phy, data_length=dl, interval_units=interval)


# ---- one link's connection events ----------------------------------------------------------
CENTRAL_TO_PERIPHERAL, PERIPHERAL_TO_CENTRAL = 0, 1


@dataclass
class Outgoing:
    """One ACL packet a host handed its controller, or a control procedure queued behind data
    (the host's Disconnect: the link ends once what was queued before it went out)."""
    size: int
    token: object
    sent: int = 0          # bytes already acknowledged by the peer
    control: bool = False  # a terminate: takes one empty exchange, then ends the link


@dataclass
class Delivery:
    """What an event did, `at_us` after its anchor."""
    at_us: int
    direction: int
    item: Outgoing
    kind: str   # "delivered": whole packet at the peer; "terminated": the control went out


class LinkModel:
    """The connection events of one link. The caller feeds what the hosts queue (`enqueue`) and
    runs an event at each anchor it is due (`run_event`); the model says when each packet
    reached the peer. Deterministic for one random generator."""

    def __init__(self, profile: Profile, settings: LinkSettings, rng: Optional[random.Random] = None):
        self.profile = profile
        self.settings = settings
        self.queues = (deque(), deque())
        self.rng = rng or random.Random(0)
        self.events = 0
        self.exchanges = 0
        self.lost = 0
        self.cut = False   # every packet lost (a radio cut)

    def busy(self) -> bool:
        return bool(self.queues[0] or self.queues[1])

    def enqueue(self, direction: int, item: Outgoing) -> None:
        self.queues[direction].append(item)

    def _lost(self) -> bool:
        if self.cut:
            return True
        p = self.profile.loss * (1.0 if self.settings.phy == PHY_2M else self.profile.loss_on_1m)
        return p > 0 and self.rng.random() < p

    def _next_fragment(self, direction: int):
        q = self.queues[direction]
        if not q:
            return None, 0
        item = q[0]
        if item.control:
            return item, 0
        dl = self.settings.data_length
        return item, min(dl, item.size - item.sent)

    def run_event(self) -> tuple:
        """One connection event. Returns (deliveries, heard): what completed, and whether the
        two sides heard each other at all (for the supervision timeout)."""
        self.events += 1
        budget = event_budget_us(self.settings.interval_us)
        cap = self.profile.packets_per_event
        phy = self.settings.phy
        elapsed, sent_here, heard = 0, 0, False
        out = []
        while True:
            c_item, c_bytes = self._next_fragment(CENTRAL_TO_PERIPHERAL)
            p_item, p_bytes = self._next_fragment(PERIPHERAL_TO_CENTRAL)
            if sent_here > 0 and c_item is None and p_item is None:
                break  # neither side has more data: the event closes
            if cap is not None and sent_here >= cap:
                break
            cost = exchange_us(phy, c_bytes, phy, p_bytes)
            if sent_here > 0 and elapsed + cost > budget:
                break
            sent_here += 1
            self.exchanges += 1
            central_heard = not self._lost()      # the peripheral received the central's packet
            peripheral_heard = not self._lost()   # the central received the peripheral's reply
            heard = heard or central_heard or peripheral_heard
            # The central's packet counts once the peripheral got it and the central got the
            # reply that acknowledges it; the peripheral's once the central got it and the
            # central's next packet acknowledges it (taken as this exchange: the next packet of
            # the event, or the next event's first one, carries the acknowledgement).
            at = elapsed + packet_us(phy, c_bytes)
            if c_item is not None:
                if central_heard and peripheral_heard:
                    out.extend(self._advance(CENTRAL_TO_PERIPHERAL, c_item, c_bytes, at))
                else:
                    self.lost += 1
            at_p = elapsed + cost - T_IFS_US
            if p_item is not None:
                if peripheral_heard and central_heard:
                    out.extend(self._advance(PERIPHERAL_TO_CENTRAL, p_item, p_bytes, at_p))
                else:
                    self.lost += 1
            elapsed += cost
            if not peripheral_heard:
                break  # the central missed the reply: it closes the event
        return out, heard

    def _advance(self, direction: int, item: Outgoing, nbytes: int, at: int):
        if item.control:
            self.queues[direction].popleft()
            return [Delivery(at, direction, item, "terminated")]
        item.sent += nbytes
        if item.sent >= item.size:
            self.queues[direction].popleft()
            return [Delivery(at, direction, item, "delivered")]
        return []


def simulate_flood(profile: Profile, settings: LinkSettings, seconds: float, pdu_bytes: int,
                   payload_per_pdu: int, buffers: Optional[int] = None, seed: int = 1) -> float:
    """Payload bytes a second a host that keeps its controller's buffers full reaches through
    LinkModel (central to peripheral): the model's own check against `ceiling_bytes_per_s`."""
    link = LinkModel(profile, settings, random.Random(seed))
    buffers = buffers or profile.acl_buffers
    in_flight = 0
    delivered = 0
    events = int(seconds * 1e6 // settings.interval_us)
    for _ in range(events):
        while in_flight < buffers:
            link.enqueue(CENTRAL_TO_PERIPHERAL, Outgoing(pdu_bytes, None))
            in_flight += 1
        done, _ = link.run_event()
        for d in done:
            in_flight -= 1
            delivered += payload_per_pdu
    return delivered / (events * settings.interval_us / 1e6)


# ---- advertising and scanning --------------------------------------------------------------
def discovery_delay_us(rng: random.Random, adv_interval_us: int, scan_interval_us: int,
                       scan_window_us: int, since_scan_start_us: int, loss: float,
                       adv_delay_max_us: int = 10_000, horizon_us: int = 60_000_000) -> int:
    """Microseconds from now until the scanner hears the advertiser: the first advertising event
    (random phase, each one interval + advDelay after the last) that falls inside one of the
    scanner's windows (each scan interval starts with a window; the scan began
    `since_scan_start_us` ago) and is not lost. An advertising event sends on all three
    primary channels, so whichever the scanner listens on hears it."""
    t = rng.uniform(0, adv_interval_us)
    while t < horizon_us:
        phase = (since_scan_start_us + t) % max(1, scan_interval_us)
        if phase < scan_window_us and not (loss > 0 and rng.random() < loss):
            return int(t)
        t += adv_interval_us + rng.uniform(0, adv_delay_max_us)
    return horizon_us


def with_profile(profile: Profile, **changes) -> Profile:
    return replace(profile, **changes)
