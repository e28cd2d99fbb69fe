"""Input records as agents see them, independent of the runtime."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes

    @property
    def source(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    def fingerprint(self) -> tuple[int, str]:
        return len(self.value), hashlib.sha256(self.value).hexdigest()
