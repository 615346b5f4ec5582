"""benchmarks/suite_workers.py keeps what a failed run says about its failures, however long the output after it."""

from benchmarks.suite_workers import failures


def test_a_failed_run_keeps_its_failure_report_and_summary_not_just_the_last_lines() -> None:
    report = "=================== FAILURES ===================\n____ test_x ____\nE   assert 1 == 2\n"
    out = "." * 10_000 + "\n" + report + "long traceback\n" * 2_000 + "=== short test summary info ===\nFAILED t\n"
    kept = failures(out)
    assert kept.startswith(report) and "FAILED t" in kept


def test_without_a_failure_section_the_end_of_the_output_is_kept() -> None:
    out = "a" * 9_000 + "the end"
    assert failures(out) == out[-4000:]
