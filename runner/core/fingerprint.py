"""Failure fingerprints: the same failure gives the same short hash from run to run.

The circuit breaker (the README, "How a session is judged") compares fingerprints of consecutive
sessions, so everything that changes between two runs of the *same* failure
(timestamps, durations, temp paths, addresses, PIDs, ports, seeds) is replaced
by a placeholder, and only the lines that identify the failure (error names,
test ids, file:line) are hashed. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re

from runner.core.lazyre import LazyPattern

_ANSI = LazyPattern(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\r")

# Order matters: specific shapes before the generic number rules that would eat them.
_RULES: tuple[tuple[LazyPattern, str], ...] = (
    (LazyPattern(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    # ISO 8601 / RFC 3339 and "2024-05-01 12:03:04,123" log stamps
    (
        LazyPattern(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"
        ),
        "<ts>",
    ),
    # "Mon, 01 May 2024 12:00:00 GMT", "May 1 12:00:00"
    (
        LazyPattern(
            r"\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),?\s+)?(?:\d{1,2}\s+)?"
            r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(?:,?\s+\d{4})?"
            r"(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?(?:\s+\d{4})?(?:\s+(?:GMT|UTC|[A-Z]{3,4}))?\b"
        ),
        "<date>",
    ),
    (LazyPattern(r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b"), "<date>"),
    (LazyPattern(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b|\b\d{1,2}:\d{2}\s?(?:[AaPp][Mm])\b"), "<time>"),
    # temp paths, pytest's tmp_path included (/tmp/pytest-of-u/pytest-12/test_x0/...)
    (
        LazyPattern(
            r"(?:/private)?/var/folders/[^\s'\":]*|/(?:tmp|var/tmp|dev/shm)/[^\s'\":]*"
            r"|[A-Za-z]:\\(?:[^\s'\"]*\\)?(?:Temp|TEMP|tmp)\\[^\s'\":]*"
        ),
        "<tmp>",
    ),
    (LazyPattern(r"\b(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):\d+\b"), "<local>:<port>"),
    (LazyPattern(r"\b0x[0-9a-f]+\b", re.I), "0x<hex>"),
    (LazyPattern(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}\b"), "<hex>"),
    (LazyPattern(r"\b((?:req|msg|toolu|run|sess|session|request|trace|span)[_-])[A-Za-z0-9]{8,}\b", re.I), r"\1<id>"),
    (LazyPattern(r"\b(pid|process|thread|tid|worker)([\s=:#]+)\d+\b", re.I), r"\1\2<pid>"),
    (LazyPattern(r"(?<=[\w)])\[\d+\](?=:)"), "[<pid>]"),  # syslog style "python[12345]:"
    # durations: "in 0.53s", "12ms", "1.2 seconds", "3m 2s", "(0:00:01.23)"
    (
        LazyPattern(
            r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hrs?|hours?)\b"
            r"(?:\s?\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds?))?"
        ),
        "<dur>",
    ),
    (LazyPattern(r"\b\d+:\d{2}:\d{2}\.\d+\b"), "<dur>"),
    (LazyPattern(r"\d+(?:\.\d+)?\s?%"), "<pct>"),
    # counts that change when unrelated tests are added; the failure count stays
    (
        LazyPattern(r"\b\d+ (passed|skipped|deselected|warnings?|xfailed|xpassed|selected|items?|tests? ran)\b"),
        r"<n> \1",
    ),
    (LazyPattern(r"(?<![:\w.])\d{5,}(?![\w.])"), "<n>"),  # seeds, sizes; `file:12345` is kept
)

# A line that says which failure this is. When a text has such lines, only they are hashed.
_MEANINGFUL = LazyPattern(
    r"error|exception|traceback|fail|fatal|panic|assert|denied|refused|not found|no such|"
    r"cannot|can't|could not|unable|invalid|undefined|missing|timed? ?out|abort|segmentation|"
    r"expected|::|\w\.\w+:\d+|^\s*E\s|^\s*>\s|line \d+",
    re.I,
)
# Progress noise: pytest's "..F..s [ 40%]", spinners, bare percentage lines.
_PROGRESS = LazyPattern(
    "|".join(
        (
            r"^[\s.FEsxX]*\[\s*<pct>\s*\]\s*$",  # "..F.. [ 40%]"
            r"^[.FEsxX]+$",  # a bare row of result dots
            r"^\S+\.\w+\s+[.FEsxX]+\s*(?:\[\s*<pct>\s*\])?$",  # "tests/test_a.py ..F. [ 50%]"
            r"^[\s|/\\=#>\-_*~]*(?:<pct>)?[\s|/\\=#>\-_*~]*$",  # bars, spinners, rules
        )
    )
)

_MAX_LINES = 60  # the end of a failure output is where the summary is


def normalise(text: str) -> str:
    """Replace the volatile parts of ``text`` with placeholders, line by line."""
    text = _ANSI.sub("", text)
    out = []
    for line in text.splitlines():
        for pattern, repl in _RULES:
            line = pattern.sub(repl, line)
        line = " ".join(line.split())
        if line and not _PROGRESS.match(line):
            out.append(line)
    return "\n".join(out)


def meaningful_lines(text: str) -> list[str]:
    """The normalised lines that identify a failure (all lines when none stands out)."""
    lines = normalise(text).splitlines()
    picked = [line for line in lines if _MEANINGFUL.search(line)] or lines
    # The same line repeated (retries, loops) must not change the identity of the failure.
    unique = list(dict.fromkeys(picked))  # the first of each, in order
    return unique[-_MAX_LINES:]


def fingerprint(text: str) -> str:
    """A 16-hex-digit hash of the failure in ``text``, stable across runs of the same failure."""
    body = "\n".join(meaningful_lines(text))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def normalise_error(text: str, *, max_chars: int = 500) -> str:
    """An agent error as one comparable line: volatile parts replaced, whitespace collapsed."""
    flat = " ".join(normalise(text).split())
    return flat if len(flat) <= max_chars else flat[: max_chars - 3] + "..."
