#!/usr/bin/env python3
"""Drives `bletransfer pair` as a person at a terminal would, for the lab's pairing scenarios.

The command runs on a pseudo-terminal (its standard input, output and error; `pair` refuses
anything else). Before the question appears this types `--early` (what a script piping `y`, or a
person typing ahead, would leave in the terminal), which `pair` must discard. It copies
everything the command prints to standard output, writes the code this host shows into
`--shown-file` once it appears, and at each prompt types `--answer`:

  other     the code the other host shows: the contents of `--other-file` (the other guest's
            --shown-file, on the shared run directory), waited for up to --wait seconds
  decline   Enter alone
  own       this host's own code (a person copying the wrong screen), then Enter alone
  TEXT      anything else, as typed

It ends with the line `PAIR-EXIT <status>`.
"""
import argparse
import os
import pty
import re
import select
import sys
import time

CODE = re.compile(rb"this host's code:\s+(\d{3}) (\d{3})")
PROMPT = re.compile(rb"Type the code that .* shows")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--early", default="", help="typed before the question (\\n for Enter)")
    parser.add_argument("--answer", default="other")
    parser.add_argument("--shown-file", required=True)
    parser.add_argument("--other-file", default="")
    parser.add_argument("--wait", type=float, default=90)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    pid, leader = pty.fork()
    if pid == 0:
        os.execvp(command[0], command)

    # Typed ahead, before `pair` could have asked anything.
    if args.early:
        os.write(leader, args.early.encode().decode("unicode_escape").encode())

    seen = b""
    prompts_answered = 0
    own_code = ""
    typed_own = False
    while True:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            seen += chunk
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        if not own_code:
            found = CODE.search(seen)
            if found:
                own_code = (found.group(1) + found.group(2)).decode()
                temporary = args.shown_file + ".tmp"
                with open(temporary, "w") as f:
                    f.write(own_code)
                os.replace(temporary, args.shown_file)
        if len(PROMPT.findall(seen)) > prompts_answered:
            prompts_answered += 1
            os.write(leader, (typed(args, own_code, typed_own) + "\n").encode())
            typed_own = typed_own or args.answer == "own"
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(f"\nPAIR-EXIT {code}", flush=True)
    return 0


def typed(args, own_code: str, typed_own: bool) -> str:
    if args.answer == "decline":
        return ""
    if args.answer == "own":
        return "" if typed_own else own_code
    if args.answer != "other":
        return args.answer
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        try:
            with open(args.other_file) as f:
                code = f.read().strip()
            if len(code) == 6:
                return code[:3] + " " + code[3:]
        except OSError:
            pass
        time.sleep(0.1)
    return ""


if __name__ == "__main__":
    sys.exit(main())
