"""The error every event decoder raises (JSON events, ``events.py``; frames, ``frames.py``):
its ``reason`` goes to the dead-letter topic."""

from __future__ import annotations


class InvalidEvent(ValueError):
    """An event that cannot be applied; ``reason`` is human-readable."""

    def __init__(self, reason: str, model: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.model = model
