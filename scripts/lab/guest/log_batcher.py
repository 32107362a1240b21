"""Copies its standard input to a file in the run folder, a batch at a time.

bluetoothd -d writes each debug line to an unbuffered stderr and btmon each packet to its
capture: straight into the run folder (9p, cache=none) every line was a round trip to the host,
and under TCG the guest's one CPU spent a share of each connection on the lab's own records
that no user's machine spends. Here they go into a local pipe; this process writes what came
every half second (or 256 KiB), and the rest when the writer ends.

Usage: log_batcher.py PATH
"""
import os
import select
import sys
import time

FLUSH_SECONDS = 0.5
FLUSH_BYTES = 256 * 1024


def main() -> None:
    path = sys.argv[1]
    source = sys.stdin.buffer.fileno()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pending = bytearray()
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        data = bytes(pending)
        pending.clear()
        last_flush = time.monotonic()
        try:
            while data:
                data = data[os.write(target, data):]
        except OSError as error:
            # The record is lost, not the writer: it must never block on a full pipe.
            print(f"log_batcher: {path}: {error}", file=sys.stderr)

    while True:
        wait = FLUSH_SECONDS if not pending else max(0.0, last_flush + FLUSH_SECONDS - time.monotonic())
        ready, _, _ = select.select([source], [], [], wait)
        if ready:
            chunk = os.read(source, 65536)
            if not chunk:
                break
            pending += chunk
        if pending and (len(pending) >= FLUSH_BYTES or time.monotonic() - last_flush >= FLUSH_SECONDS):
            flush()
    flush()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
