"""Failure fingerprints: stable across runs of the same failure, distinct across failures."""

from __future__ import annotations

from runner.core.fingerprint import fingerprint, meaningful_lines, normalise, normalise_error

PYTEST_RUN = """\
============================= test session starts ==============================
platform linux -- Python 3.11.4, pytest-8.2.0, pluggy-1.5.0
rootdir: {tmp}
collected {collected} items

tests/test_calc.py ....F.......                                          [{pct}%]

=================================== FAILURES ===================================
_________________________________ {test} _________________________________

    def {test}():
>       assert add(1, 2) == 4
E       assert 3 == 4

tests/test_calc.py:{line}: AssertionError
----------------------------- Captured stderr call -----------------------------
{stamp} INFO worker pid={pid} at 0x{addr} listening on 127.0.0.1:{port}
wrote {tmp}/out.db in {dur}ms (request {uuid})
=========================== short test summary info ============================
FAILED tests/test_calc.py::{test} - assert 3 == 4
======================= 1 failed, {passed} passed in {secs}s =======================
"""

RUN_A = dict(
    tmp="/tmp/pytest-of-ci/pytest-12/test_calc0", collected=12, pct=100, test="test_add", line=7,
    stamp="2024-05-01T12:03:04.123Z", pid=4312, addr="7f3a2b1c4d50", port=53211, dur=12,
    uuid="3f2b8c1e-9a4d-4e2f-8b6a-1c2d3e4f5a6b", passed=11, secs="0.53",
)
RUN_B = dict(
    RUN_A, tmp="/var/folders/xy/T/pytest-of-me/pytest-3/test_calc0", collected=14, stamp="2025-01-09 23:59:01,7",
    pid=99881, addr="55d0c0ffee10", port=40001, dur=431, uuid="00000000-1111-2222-3333-444444444444",
    passed=13, secs="12.07",
)


def test_same_failure_with_volatile_details_has_the_same_fingerprint() -> None:
    """Timestamps, temp paths, durations, PIDs, addresses, ports, UUIDs and counts do not change it."""
    assert fingerprint(PYTEST_RUN.format(**RUN_A)) == fingerprint(PYTEST_RUN.format(**RUN_B))


def test_different_failing_test_has_a_different_fingerprint() -> None:
    """Another failing test id gives another fingerprint."""
    other = dict(RUN_A, test="test_sub")
    assert fingerprint(PYTEST_RUN.format(**RUN_A)) != fingerprint(PYTEST_RUN.format(**other))


def test_different_failure_location_has_a_different_fingerprint() -> None:
    """The file:line of the failure is meaningful and kept."""
    moved = dict(RUN_A, line=12)
    assert fingerprint(PYTEST_RUN.format(**RUN_A)) != fingerprint(PYTEST_RUN.format(**moved))


def test_fingerprint_is_short_hex_and_deterministic() -> None:
    """The fingerprint is 16 hex digits and the same for the same text."""
    fp = fingerprint("Error: boom")
    assert fp == fingerprint("Error: boom") and len(fp) == 16 and int(fp, 16) >= 0


def test_normalise_replaces_volatile_parts() -> None:
    """Each volatile shape becomes a placeholder while error names and test ids stay."""
    text = normalise(PYTEST_RUN.format(**RUN_A))
    for gone in ("2024-05-01", "4312", "7f3a2b1c4d50", "53211", "pytest-12", "0.53s", "3f2b8c1e"):
        assert gone not in text, gone
    for kept in ("AssertionError", "tests/test_calc.py::test_add", "tests/test_calc.py:7"):
        assert kept in text, kept


def test_progress_lines_and_ansi_codes_do_not_matter() -> None:
    """Progress bars, percentage lines and colour codes are noise."""
    plain = "compiling\nerror[E0308]: mismatched types\n  --> src/main.rs:4:5\n"
    noisy = "\x1b[32mcompiling\x1b[0m\n[=====>    ] 45%\n\x1b[31merror[E0308]\x1b[0m: mismatched types\n  --> src/main.rs:4:5\n 99%\n"
    assert fingerprint(plain) == fingerprint(noisy)


def test_clock_times_and_dates_are_normalised() -> None:
    """Clock times and plain dates in log lines do not change the fingerprint."""
    a = "[12:01:02] ERROR could not connect (attempt at 01/05/2024)"
    b = "[23:59:59.999] ERROR could not connect (attempt at 09/12/2025)"
    assert fingerprint(a) == fingerprint(b)


def test_repeated_lines_count_once() -> None:
    """The same error printed more times (retries) is the same failure."""
    assert fingerprint("ConnectionError: refused\n") == fingerprint("ConnectionError: refused\n" * 5)


def test_text_without_error_markers_still_hashes_all_lines() -> None:
    """When no line stands out, every normalised line counts."""
    assert meaningful_lines("alpha\nbeta\n") == ["alpha", "beta"]
    assert fingerprint("alpha\nbeta") != fingerprint("alpha\ngamma")


def test_normalise_error_is_one_bounded_comparable_line() -> None:
    """Agent errors with different request ids and times normalise to the same line."""
    a = normalise_error("API Error: 500 {'type':'error'} request_id=req_011CQ9xYz12AbCdEfGh at 2025-03-01T10:00:00Z\n")
    b = normalise_error("API Error: 500  {'type':'error'}  request_id=req_0abcdef123456789XYZ at 2025-03-02T11:22:33Z")
    assert a == b and "\n" not in a and "API Error: 500" in a
    assert len(normalise_error("x" * 5000)) <= 500
