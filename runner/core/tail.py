"""A bounded tail of a byte stream: memory stays flat however much is fed."""

from __future__ import annotations


class BoundedTail:
    """Keep the last ``max_bytes`` of everything fed, and count all of it.

    The buffer is trimmed only when it reaches twice the bound, so feeding many
    small chunks costs amortised O(1) per byte instead of a copy per chunk.
    """

    def __init__(self, max_bytes: int = 16384) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self.total_bytes = 0
        self.total_lines = 0
        self._last_byte = b""

    def feed(self, chunk: bytes | str) -> None:
        data = chunk.encode("utf-8", errors="replace") if isinstance(chunk, str) else bytes(chunk)
        if not data:
            return
        self.total_bytes += len(data)
        self.total_lines += data.count(b"\n")
        self._last_byte = data[-1:]
        if len(data) >= self.max_bytes:
            # One huge chunk: keep only its end; never copy the rest into the buffer.
            self._buf = bytearray(data[-self.max_bytes :])
            return
        self._buf += data
        if len(self._buf) >= 2 * self.max_bytes:
            del self._buf[: len(self._buf) - self.max_bytes]

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.max_bytes

    @property
    def lines(self) -> int:
        """Lines seen, counting a final line without a newline."""
        partial = 1 if self._last_byte and self._last_byte != b"\n" else 0
        return self.total_lines + partial

    def bytes(self) -> bytes:
        return bytes(self._buf[-self.max_bytes :])

    def text(self, *, whole_lines: bool = True) -> str:
        """The tail decoded as UTF-8 (invalid bytes replaced).

        When the stream was cut, the first line is usually a fragment whose
        start depends on how long the earlier output was; ``whole_lines`` drops
        it so the tail of two runs of the same failure starts at the same place.
        A tail that is one long line is kept as it is.
        """
        data = self.bytes()
        if whole_lines and self.truncated:
            newline = data.find(b"\n")
            if 0 <= newline < len(data) - 1:
                data = data[newline + 1 :]
        if self.truncated:
            # The cut may fall inside a multi-byte character: drop its continuation bytes.
            start = 0
            while start < min(len(data), 3) and 0x80 <= data[start] <= 0xBF:
                start += 1
            data = data[start:]
        return data.decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return min(len(self._buf), self.max_bytes)
