"""Print SIZE bytes of filler, then a fixed failure tail, then exit 1: a gate with a huge output.

Usage: python gen_output.py SIZE_BYTES. Standard library only; run by path as the gate command.
"""

import sys

TAIL_LINES = 400  # about 30 KB: more than the 16 KB tail, so the tail is this text whatever came before


def tail_text() -> str:
    lines = [f"FAILED tests/test_big.py::test_case_{i:04d} - AssertionError: expected {i} got {i + 1}"
             for i in range(TAIL_LINES)]
    return "\n".join(lines) + "\nEND-OF-OUTPUT\n"


def main() -> int:
    size = int(sys.argv[1])
    line = b"filler " + b"x" * 120 + b"\n"
    block = line * (2**20 // len(line))
    out = sys.stdout.buffer
    written = 0
    while written + len(block) <= size:
        out.write(block)
        written += len(block)
    out.write(line * ((size - written) // len(line)))
    out.write(tail_text().encode())
    out.flush()
    return 1


if __name__ == "__main__":
    sys.exit(main())
