"""What the lab's peer scripts share: the transfer service of Apple's "BTLE Transfer" sample,
its end-of-message value, their output lines and their common options. Plain Python (no bleak
or bless), imported from this folder by the scripts beside it."""
import argparse

DEFAULT_SERVICE = "E20A39F4-73F5-4BC4-A12F-17D1AD07A961"
DEFAULT_CHARACTERISTIC = "08590F7E-DB05-467E-8757-72F6FAEB13D4"
EOM = b"EOM"


def say(*parts):
    """One line on stdout, flushed at once: the scenarios wait on these lines."""
    print(*parts, flush=True)


def argument_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by the first line of `doc` (the script's docstring), with --service
    and --characteristic (default: the sample's UUIDs)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--service", default=DEFAULT_SERVICE)
    p.add_argument("--characteristic", default=DEFAULT_CHARACTERISTIC)
    return p
