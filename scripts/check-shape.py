#!/usr/bin/env python3
"""The shape rules of Sources, checked without building (docs/architecture.md, "Shape").

    python3 scripts/check-shape.py [ROOT]

Rules, each a line "ok: ..." or "FAIL: ..." with the places that break it:
  - no file in Sources/Roles is over 400 lines: a role is a shell that carries bytes;
  - no function, initialiser or subscript in Sources is over 80 lines;
  - Transfer, Trust/Session and Machines open, read and write no file: the shells do;
  - Transfer holds no version-1 framed type: version 1 is retired on the wire;
  - fewer than 400 public declarations: only the BlueZ library is meant to export.
Prints the size of Sources as a figure, not a rule. Ends with "shape: N passed, M failed";
exits 1 when a rule is broken.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SOURCES = os.path.join(ROOT, "Sources")

ROLE_FILE_LIMIT = 400
FUNCTION_LIMIT = 80
PUBLIC_LIMIT = 400
PURE_FOLDERS = ["Transfer", "Trust/Session", "Machines"]
# Calls that reach a file: Foundation's and swift-system's file types, PayloadFile's own reads
# and writes, and C's file calls in a file that imports C (elsewhere `open(` is a method).
FILE_CALLS = re.compile(
    r"\bFileManager\b|\bFileHandle\b|\bFileDescriptor\b|Data\(contentsOf:|\.write\(to:"
    r"|\bopenForReading\b|\.read\(at:|\.write\([^)\n]*,\s*at:"
)
C_FILE_CALLS = re.compile(
    r"(?<![.\w])(open|openat|fopen|pread|pwrite|fsync|ftruncate|unlink|unlinkat|rename|renameat|mkdir|mkdirat)\s*\("
)
IMPORTS_C = re.compile(r"^\s*import\s+(Glibc|Musl|Darwin|Foundation|SystemPackage|C[A-Z]\w*)\b", re.M)
FRAMED_V1 = re.compile(r"\b(FramedHeader|FramedAck|FramedHello|case\s+framed\b|\.framed\b|version1)\b")
DECLARATION = re.compile(
    r"^[ \t]*(?:(?:@\w+(?:\([^)\n]*\))?|[a-z]+(?:\([a-z]+\))?)[ \t]+)*(?:func[ \t]+\S|init[?!]?[ \t]*[(<]|deinit\b|subscript[ \t]*[(<])"
)
PUBLIC = re.compile(r"^[ \t]*(?:@\w+(?:\([^)\n]*\))?[ \t]+)*(?:[a-z]+[ \t]+)*(?:public|open)[ \t]+(?!import)", re.M)


def swift_files(folder):
    for directory, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith(".swift"):
                yield os.path.join(directory, name)


def code_only(text):
    """The text with comments and string literals blanked out, newlines kept, so that braces
    and words in them count for nothing."""
    out, i, n = [], 0, len(text)
    block_depth = 0
    while i < n:
        c, two = text[i], text[i:i + 2]
        if block_depth:
            if two == "/*":
                block_depth += 1; i += 2; continue
            if two == "*/":
                block_depth -= 1; i += 2; continue
            out.append("\n" if c == "\n" else " "); i += 1; continue
        if two == "/*":
            block_depth = 1; i += 2; continue
        if two == "//":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == '"' or (c == "#" and re.match(r'#+"', text[i:])):
            i = skip_string(text, i, out)
            continue
        out.append(c); i += 1
    return "".join(out)


def skip_string(text, i, out):
    """Skips a string literal starting at i (plain, multi-line or raw); writes its newlines.
    Interpolations are blanked too: a brace inside one belongs to the string's line."""
    hashes = len(re.match(r"#*", text[i:]).group(0))
    i += hashes
    delimiter = '"""' if text.startswith('"""', i) else '"'
    closing = delimiter + "#" * hashes
    i += len(delimiter)
    depth = 0
    while i < len(text):
        if depth == 0 and text.startswith(closing, i):
            return i + len(closing)
        c = text[i]
        if c == "\\" and text.startswith("#" * hashes + "(", i + 1):
            depth += 1; i += 2 + hashes; continue
        if c == "\\" and hashes == 0:
            i += 2; continue
        if depth and c == "(":
            depth += 1
        elif depth and c == ")":
            depth -= 1
        if c == "\n":
            out.append("\n")
        i += 1
    return i


def function_lengths(path):
    """(line, length) of every function, initialiser and subscript body in the file."""
    with open(path, encoding="utf-8") as f:
        code = code_only(f.read())
    lines = code.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    found = []
    for number, line in enumerate(lines):
        if not DECLARATION.match(line):
            continue
        body = body_start(code, starts[number])
        if body is None:
            continue
        end = matching_brace(code, body)
        end_line = code.count("\n", 0, end)
        found.append((number + 1, end_line - number + 1))
    return found


def body_start(code, i):
    """Where the declaration starting at i opens its body, or None for a requirement without one."""
    depth = 0
    while i < len(code):
        c = code[i]
        if c in "([<":
            depth += 1
        elif c in ")]>" and depth:
            depth -= 1
        elif c == "-" and code.startswith("->", i):
            i += 2; continue
        elif depth == 0 and c == "{":
            return i
        elif depth == 0 and c == "}":
            return None
        elif depth == 0 and c == "\n":
            rest = code[i + 1:i + 200].lstrip()
            if re.match(r"(?:@\w+|(?:[a-z]+[ \t]+)*(?:func|var|let|init|deinit|case|subscript|typealias|associatedtype|static|struct|enum|class|actor|extension|protocol)\b)", rest):
                return None
        i += 1
    return None


def matching_brace(code, i):
    depth = 0
    while i < len(code):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return i


def relative(path):
    return os.path.relpath(path, ROOT)


def main():
    passed = failed = 0

    def rule(ok, title, offenders):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok: {title}")
        else:
            failed += 1
            print(f"FAIL: {title}")
            for offender in offenders[:20]:
                print(f"  {offender}")

    files = list(swift_files(SOURCES))
    sizes = {path: sum(1 for _ in open(path, encoding="utf-8")) for path in files}

    roles = [(sizes[p], p) for p in files if relative(p).startswith("Sources/Roles/")]
    long_roles = [f"{relative(p)}: {n} lines" for n, p in sorted(roles, reverse=True) if n > ROLE_FILE_LIMIT]
    largest = max(roles)[0] if roles else 0
    rule(not long_roles, f"no file in Sources/Roles over {ROLE_FILE_LIMIT} lines (largest {largest})", long_roles)

    lengths = [(n, f"{relative(p)}:{line}") for p in files for line, n in function_lengths(p)]
    long_functions = [f"{place}: {n} lines" for n, place in sorted(lengths, reverse=True) if n > FUNCTION_LIMIT]
    longest = max(lengths)[0] if lengths else 0
    rule(not long_functions,
         f"no function in Sources over {FUNCTION_LIMIT} lines ({len(lengths)} bodies, longest {longest})",
         long_functions)

    io_calls = []
    for folder in PURE_FOLDERS:
        for path in swift_files(os.path.join(SOURCES, folder)):
            with open(path, encoding="utf-8") as f:
                code = code_only(f.read())
            reaches_c = IMPORTS_C.search(code) is not None
            for number, line in enumerate(code.split("\n"), 1):
                if FILE_CALLS.search(line) or (reaches_c and C_FILE_CALLS.search(line)):
                    io_calls.append(f"{relative(path)}:{number}: {line.strip()}")
    rule(not io_calls, f"no file I/O in {', '.join(PURE_FOLDERS)}", io_calls)

    framed = []
    for path in swift_files(os.path.join(SOURCES, "Transfer")):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(code_only(f.read()).split("\n"), 1):
                if FRAMED_V1.search(line):
                    framed.append(f"{relative(path)}:{number}: {line.strip()}")
    rule(not framed, "no version-1 framed type in Transfer", framed)

    public_count = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            public_count += len(PUBLIC.findall(code_only(f.read())))
    rule(public_count < PUBLIC_LIMIT, f"{public_count} public declarations (under {PUBLIC_LIMIT})", [])

    print(f"figure: Sources holds {sum(sizes.values())} lines in {len(files)} files")
    print(f"shape: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
