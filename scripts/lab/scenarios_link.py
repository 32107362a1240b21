#!/usr/bin/env python3
"""Lab scenarios for the radio itself (guest/hci_radio.py, guest/radio_model.py): what each link
profile carries, measured against the model's ceiling in the same run.

- `link-default`: on the lab's default profile (or LAB_LINK), an L2CAP flood from a to b in the
  SDUs bletransfer's channel uses, against the profile's ceiling; and a GATT write with response
  and its answer, which on a radio takes at least one connection interval.
- `link-profiles` (long): the same on every profile, switching the radio between them; a profile
  faster than the guests' emulated CPUs carry says so and reports no figure.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "guest"))
import radio_model as rm  # noqa: E402
from scenarios import Context, ScenarioSkipped, l2cap_capacity, scenario  # noqa: E402
from lab_events import peer_events  # noqa: E402

# Seconds of data each flood carries at the profile's ceiling: long enough that the start
# (connection, discovery, the first credits) costs under a tenth of it.
FLOOD_SECONDS = 12


def link_of_last_connection(ctx: Context) -> dict | None:
    links = ctx.lab.link_status().get("links", [])
    return links[-1] if links else None


def flood_against_ceiling(ctx: Context, profile: rm.Profile, label: str) -> float | None:
    """An L2CAP flood a → b in 8 KiB SDUs (bletransfer's channel MTU), sized to FLOOD_SECONDS
    at the ceiling of the link the radio reports; the flood over that ceiling."""
    if not profile.timed:
        return None
    settled = rm.settled_link(profile)
    ceiling = rm.profile_channel_ceiling(profile, settled)
    frames = max(4, int(ceiling * FLOOD_SECONDS / 8192))
    kib_s = l2cap_capacity(ctx, frames=frames, sdu=8192, sender="a")
    link = link_of_last_connection(ctx)
    if link is not None:
        # The ceiling of the link as it ran (the hosts may have asked for another interval).
        ran = rm.LinkSettings(phy=rm.PHY_2M if link["phy"] == "2M" else rm.PHY_1M,
                              data_length=link["data_length"],
                              interval_units=int(round(link["interval_ms"] / 1.25)))
        ceiling = rm.profile_channel_ceiling(profile, ran)
        ctx.figure(f"link_{label}_settings", ran.describe())
        ctx.figure(f"link_{label}_lost_packets", link["lost"])
    ratio = round(kib_s * 1024 / ceiling, 2)
    ctx.figure(f"link_{label}_ceiling_kib_s", round(ceiling / 1024, 1))
    ctx.figure(f"link_{label}_flood_kib_s", kib_s)
    ctx.figure(f"link_{label}_flood_ceiling_ratio", ratio)
    return ratio


def write_round_trip(ctx: Context, profile: rm.Profile, label: str) -> float:
    """Median milliseconds of a GATT write with response and its answer (bleak on b, a bless
    peripheral on a), against the link's interval."""
    res = ctx.lab.run(a='"$LAB_PYTHON" "$LAB_PEERS/write_rtt.py" serve',
                      b='"$LAB_PYTHON" "$LAB_PEERS/write_rtt.py" measure --count 10',
                      b_after=("a", r"^READY"), deadline=180, step="GATT write round trips", finish_with="b")
    rtt = peer_events(res.job("b").stdout(), "RTT")
    ctx.check(len(rtt) == 1, "the central timed its writes")
    median_ms = rtt[0]["median_ms"]
    ctx.figure(f"link_{label}_write_rtt_ms", median_ms)
    ctx.figure(f"link_{label}_write_rtt_min_ms", rtt[0]["min_ms"])
    link = link_of_last_connection(ctx)
    if profile.timed and link is not None:
        interval = link["interval_ms"]
        ctx.figure(f"link_{label}_interval_ms", interval)
        ctx.check(rtt[0]["min_ms"] >= interval,
                  f"every write and its answer took at least one connection interval ({interval} ms) "
                  f"on {profile.name}: the fastest took {rtt[0]['min_ms']} ms")
    return median_ms


def profile_checks(ctx: Context, name: str) -> None:
    profile = rm.PROFILES[name]
    label = name.replace("-", "_")
    if profile.beyond_lab:
        ctx.figure(f"link_{label}_flood", f"not measured: {profile.beyond_lab}")
    else:
        ratio = flood_against_ceiling(ctx, profile, label)
        if ratio is not None:
            ctx.check(ratio >= 0.9, f"the flood on {name} reached {ratio} of the model's ceiling (at least 0.9)")
    write_round_trip(ctx, profile, label)


@scenario("link-default", tags=("link", "throughput", "virtual"))
def link_default(ctx: Context):
    """The lab's link profile (LAB_LINK, default linux-default): an L2CAP flood a → b in 8 KiB
    SDUs reaches at least 0.9 of the model's ceiling, and every GATT write with response takes
    at least one connection interval."""
    ctx.figure("link_profile", ctx.lab.link)
    profile_checks(ctx, ctx.lab.link)


@scenario("link-profiles", tags=("link", "throughput", "virtual", "long"))
def link_profiles(ctx: Context):
    """Every link profile in turn: the flood against its ceiling (or the one line why the lab
    cannot carry it) and the GATT write round trip; the radio goes back to the lab's profile."""
    start = ctx.lab.link
    try:
        for name in rm.PROFILES:
            ctx.lab.use_link(name)
            ctx.lab.ensure_ready()
            profile_checks(ctx, name)
    finally:
        ctx.lab.use_link(start)
