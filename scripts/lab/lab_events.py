#!/usr/bin/env python3
"""Reading what the lab's commands print: bletransfer's `--json` events, the `TAG {json}` lines
of the lab's own peers (peers/*.py), and the guest clock's stamps that `stamped` puts in front
of output lines.

bletransfer prints one event a line, a JSON object with sorted keys and no spaces, so one kind
of event is found by its `"event":"NAME"` and a number by its `"key":N`. Used by scenarios.py
and by the scenarios_*.py modules; it imports none of them.
"""
from __future__ import annotations

import json
import re
from datetime import datetime


# =============================================================================================
# bletransfer --json
# =============================================================================================
def event_lines(text: str, name: str) -> list[str]:
    """The lines of `text` that hold one event kind, as printed: for counting, for a look at a
    field, and for `stamped` output (the stamp stays in front)."""
    return [line for line in text.splitlines() if f'"event":"{name}"' in line]


def json_events(text: str, name: str) -> list[dict]:
    """The events of one kind in a command's output, parsed. A line that is not a JSON object
    (a log line quoting an event, a line cut short by a killed process) is left out."""
    found = []
    for line in event_lines(text, name):
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def stamped_events(text: str, name: str) -> list[dict]:
    """The events of one kind in `stamped` output, parsed, without their stamps."""
    return [json.loads(m) for m in re.findall(rf'^[0-9.]+ (\{{.*"event":"{re.escape(name)}".*\}})$', text, re.M)]


def states(text: str) -> list[str]:
    """The adapter states a command reported (`"state":"poweredOn"` …), in order."""
    return re.findall(r'"state":"(\w+)"', text)


def event_number(line: str, key: str) -> float | None:
    """The first number under `key` in an event line, at whatever depth (`seconds` sits in the
    event's `message`), or None."""
    found = re.search(rf'"{re.escape(key)}":([0-9.]+)', line)
    return float(found.group(1)) if found else None


def last_event_number(text: str, name: str, key: str) -> float | None:
    """`key`'s number in the last event of kind `name` that has one (the `seconds` of the last
    `received`, say), or None."""
    numbers = [n for n in (event_number(line, key) for line in event_lines(text, name)) if n is not None]
    return numbers[-1] if numbers else None


def progress_of(total: int) -> str:
    """A regex matching the first progress event of the message of `total` bytes (for a
    timeline trigger)."""
    return rf'"event":"progress"[^\n]*"total":{total}\b'


def epoch_seconds(iso_time: str) -> float:
    """Seconds since the epoch of an event's ISO 8601 `time`."""
    return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp()


# =============================================================================================
# The lab's peers (peers/*.py)
# =============================================================================================
def peer_events(text: str, tag: str) -> list[dict]:
    """JSON payloads of the lines `TAG {json}` a peer printed (RECEIVED, CALL, DROPPED …)."""
    return [json.loads(m.group(1)) for m in re.finditer(rf"^{tag} (\{{.*\}})$", text, re.M)]


# =============================================================================================
# Timings on the guest's clock
# =============================================================================================
def stamped(cmd: str) -> str:
    """Runs `cmd` with every output line prefixed by the guest's clock (seconds since the epoch,
    ns precision), after a line `T0 <start time>`; for latency figures."""
    return (f"echo T0 $(date +%s.%N); {cmd} 2>&1 | "
            "while IFS= read -r line; do echo \"$(date +%s.%N) $line\"; done")


def first_at(text: str, pattern: str) -> float | None:
    """Seconds from T0 to the first stamped line matching `pattern`."""
    t0 = re.search(r"^T0 ([0-9.]+)$", text, re.M)
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        if t0 and re.search(pattern, rest) and re.fullmatch(r"[0-9.]+", stamp):
            return round(float(stamp) - float(t0.group(1)), 2)
    return None


def rescan_gaps(stamped_output: str) -> list[float]:
    """Seconds from each `disconnected` event to the next `connecting` one, from `stamped` output."""
    gaps, left_at = [], None
    for line in stamped_output.splitlines():
        stamp, _, rest = line.partition(" ")
        if not re.fullmatch(r"[0-9.]+", stamp):
            continue
        if '"event":"disconnected"' in rest:
            left_at = float(stamp)
        elif '"event":"connecting"' in rest and left_at is not None:
            gaps.append(round(float(stamp) - left_at, 2))
            left_at = None
    return gaps


def visit_timeline(text: str, steps: tuple) -> dict:
    """Seconds from the receive process's launch (the line `T0 <epoch>` printed just before it)
    to the first event of each of `steps`, from the events' own `unixTime` (same guest clock; no
    per-line stamping, whose forks cost tenths of a second under TCG)."""
    t0 = re.search(r"^T0 ([0-9.]+)$", text, re.M)
    marks = {}
    for step in steps:
        line = next(iter(event_lines(text, step)), None)
        when = event_number(line or "", "unixTime")
        if t0 and when is not None:
            marks[step] = round(when - float(t0.group(1)), 2)
    return marks


def median(values: list) -> float | None:
    """The median of some timings (the mean of the middle two for an even count); None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else round((ordered[middle - 1] + ordered[middle]) / 2, 2)
