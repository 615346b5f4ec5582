"""The bounded tail keeps the end of a stream and counts all of it."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.tail import BoundedTail
from tests.hypothesis_profiles import examples


def test_keeps_everything_below_the_bound() -> None:
    """Output shorter than the bound is kept whole, str and bytes alike."""
    tail = BoundedTail(100)
    tail.feed("hello\n")
    tail.feed(b"world")
    assert tail.text() == "hello\nworld" and not tail.truncated
    assert tail.total_bytes == 11 and tail.lines == 2


def test_keeps_only_the_last_bytes_and_starts_at_a_whole_line() -> None:
    """Past the bound the tail holds the end of the stream, starting at a line boundary."""
    tail = BoundedTail(64)
    for i in range(1000):
        tail.feed(f"line {i}\n")
    text = tail.text()
    assert text.endswith("line 999\n") and text.startswith("line ")
    assert len(text.encode()) <= 64 and tail.truncated
    assert tail.total_lines == 1000


def test_one_long_line_is_kept_even_when_cut() -> None:
    """A tail that is a single long line is not dropped for being a fragment."""
    tail = BoundedTail(10)
    tail.feed("x" * 100)
    assert tail.text() == "x" * 10


def test_cut_inside_a_multibyte_character_decodes_cleanly() -> None:
    """A cut through a UTF-8 character drops the fragment instead of showing replacement marks."""
    tail = BoundedTail(5)
    tail.feed("ééééé".encode())  # 10 bytes; the last 5 start mid-character
    assert tail.text(whole_lines=False) == "éé"


def test_memory_stays_flat_however_much_is_fed() -> None:
    """Feeding 50 MB in small chunks never holds more than a few times the bound."""
    chunk = b"y" * 4096
    tracemalloc.start()
    try:
        tail = BoundedTail(16384)
        for _ in range(50 * 256):
            tail.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
    assert tail.total_bytes == 50 * 1024 * 1024 and len(tail) == 16384


@settings(max_examples=examples(ci=100, thorough=1000))
@given(st.lists(st.binary(max_size=50), max_size=40), st.integers(min_value=1, max_value=64))
def test_tail_equals_the_end_of_the_concatenation(chunks: list[bytes], bound: int) -> None:
    """Whatever the chunking, the kept bytes are the last `bound` bytes of everything fed."""
    tail = BoundedTail(bound)
    for c in chunks:
        tail.feed(c)
    whole = b"".join(chunks)
    assert tail.bytes() == whole[-bound:] and tail.total_bytes == len(whole)
