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
import os
import re
import shlex
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


# =============================================================================================
# The product on the radio: link tuning (bletransfer link ..., send/receive's link watch).
# =============================================================================================
def _transfer_rate(ctx: Context, data: bytes, name: str, options: str) -> tuple:
    """send --file on a → receive --output on b with `options` on both; (KiB/s of the message as
    b measured it, b's output, a's output)."""
    from scenarios_roles import transfer  # noqa: E402  (the roles module registers scenarios)
    from lab_events import last_event_number
    res, _ = transfer(ctx, data, deadline=600, name=name, options=options)
    seconds = last_event_number(res.job("b").stdout(), "received", "seconds")
    rate = round(len(data) / 1024 / seconds, 1) if seconds else 0.0
    return rate, res.job("b").stdout(), res.job("a").stdout()


@scenario("link-tuning", tags=("bletransfer", "link", "throughput", "virtual"))
def link_tuning(ctx: Context):
    """On the lab's profile, the product asking for the best link both hosts allow: 128 KiB
    with --no-tune (the untuned link), then 1 MiB as send and receive run by default (as root
    they ask for 2M and a 7.5-15 ms interval, and put the adapters back at the end), with
    `status` on b during it; then, the adapters tuned with `link tune`, an L2CAP flood and 1 MiB
    over GATT. The tuned rate against the ceiling of the best link both modelled controllers
    allow (at least 0.9), against the tuned flood (0.9; GATT 0.7) and against the untuned rate,
    all in the same run; afterwards the adapters ask for the kernel's defaults again and no
    tuned link is left."""
    ctx.require_bletransfer()
    from lab_events import json_events, last_event_number
    profile = rm.PROFILES[ctx.lab.link]
    if not profile.timed:
        raise ScenarioSkipped("the instant profile has no link to tune")
    best_link = rm.best_link(profile)
    best = rm.profile_channel_ceiling(profile, best_link) / 1024
    best_phy = "2M" if best_link.phy == rm.PHY_2M else "1M"   # a 1M-only profile (rpi, far) stays on 1M
    untuned_rate, b_untuned, _ = _transfer_rate(ctx, os.urandom(128 * 1024), "untuned", " --no-tune")
    links = json_events(b_untuned, "link")
    ctx.check(bool(links) and not links[-1]["tuned"], f"--no-tune left the link untuned: {links[-1:]}")
    ctx.figure("link_untuned", links[-1]["summary"] if links else "?")
    ctx.figure("link_untuned_kib_s", untuned_rate)
    ctx.figure("link_untuned_ceiling_kib_s", round(rm.profile_channel_ceiling(profile) / 1024, 1))

    # Tuned by the commands themselves, with `status` on b once the data flows.
    data = os.urandom(1024 * 1024)
    msg = ctx.payload("tuned", data)
    out = ctx.path("tuned-received")
    status = ('for i in $(seq 1 40); do "$BLETRANSFER_BIN" status --json 2>/dev/null | grep -q \'"intervalMs"\' '
              '&& break; sleep 0.5; done; "$BLETRANSFER_BIN" status --json')
    started = {}
    res = ctx.lab.run(a=f'"$BLETRANSFER_BIN" send --json --file {shlex.quote(msg)} --timeout 600',
                      b=f'"$BLETRANSFER_BIN" receive --json --output {shlex.quote(out)} --timeout 600',
                      b_after=("a", r'"event":"advertising"'), deadline=660, step="tuned 1 MiB",
                      timeline=((("b", r'"event":"progress"', 1.0),
                                 lambda lab: started.setdefault("status", lab.start("b", status, "status during", 60))),))
    ctx.check(ctx.read(out) == data, "the tuned 1 MiB arrived whole")
    seconds = last_event_number(res.job("b").stdout(), "received", "seconds")
    tuned_rate = round(1024 / seconds, 1) if seconds else 0.0
    b_links = json_events(res.job("b").stdout(), "link")
    ctx.check(bool(b_links) and b_links[-1]["tuned"], f"the receiver reported a tuned link: {b_links[-1:]}")
    ctx.figure("link_tuned", b_links[-1]["summary"] if b_links else "?")
    ctx.figure("link_tuned_kib_s", tuned_rate)
    ctx.figure("link_best_ceiling_kib_s", round(best, 1))
    ctx.figure("link_tuned_best_ceiling_ratio", round(tuned_rate / best, 2))
    ctx.figure("link_tuned_untuned_ratio", round(tuned_rate / max(untuned_rate, 1e-6), 2))
    ctx.check(tuned_rate >= 0.9 * best, f"tuned {tuned_rate} KiB/s is at least 0.9 of the best link's ceiling {best:.1f}")
    if "status" in started:
        job = started["status"]
        job.wait()
        shown = json.loads(job.stdout() or "{}")
        connections = [c for c in shown.get("connections", []) if c.get("link", {}).get("intervalMs")]
        ctx.figure("link_status_during", "; ".join(f"{c['role']} {c['link']['phy']} {c['link']['intervalMs']} ms "
                                                  f"{c['link']['dataLength']} B" for c in connections))
        ctx.check(any(c["link"]["intervalMs"] <= 15 and c["link"]["phy"] == best_phy for c in connections),
                  f"status during the transfer shows the tuned link: {shown.get('connections')}")
        ctx.check(all(a["tuned"] for a in shown.get("linkTuning", [])), "status shows the adapter tuned")
    for host in ("a", "b"):
        after = json.loads(ctx.lab.sh(host, '"$BLETRANSFER_BIN" link show --json', step=f"{host} after").stdout())
        ctx.check(not after["tuned"], f"{host}'s adapter asks for the kernel's defaults again after the run: {after}")
    for link in ctx.lab.link_status().get("links", []):
        ctx.check(link["interval_ms"] >= 30, f"no tuned link left idle: {link}")

    # The same-run baselines on the tuned link: a flood, then 1 MiB over GATT.
    for host in ("a", "b"):
        ctx.lab.sh(host, '"$BLETRANSFER_BIN" link tune', step=f"{host} link tune")
    try:
        tuned_flood = l2cap_capacity(ctx, frames=max(4, int(best * 1024 * 12 / 8192)), sdu=8192, sender="a")
        ctx.figure("link_tuned_flood_kib_s", tuned_flood)
        ctx.figure("link_tuned_flood_ratio", round(tuned_rate / max(tuned_flood, 1e-6), 2))
        ctx.check(tuned_rate >= 0.9 * tuned_flood, f"tuned {tuned_rate} KiB/s is at least 0.9 of the tuned flood {tuned_flood}")
        gatt_rate, _, _ = _transfer_rate(ctx, data, "tuned-gatt", " --no-l2cap")
        ctx.figure("link_tuned_gatt_kib_s", gatt_rate)
        ctx.figure("link_tuned_gatt_flood_ratio", round(gatt_rate / max(tuned_flood, 1e-6), 2))
        ctx.check(gatt_rate >= 0.7 * tuned_flood, f"GATT {gatt_rate} KiB/s is at least 0.7 of the tuned flood {tuned_flood}")
    finally:
        for host in ("a", "b"):
            ctx.lab.sh(host, '"$BLETRANSFER_BIN" link relax', step=f"{host} link relax", check=False)
