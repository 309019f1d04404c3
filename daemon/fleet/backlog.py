"""The events waiting for the server: bounded, oldest dropped first, and counted."""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["Backlog", "Message"]

Message = tuple[str, str, bytes]  # message id, subject, payload


class Backlog:
    """A FIFO of messages; a message leaves it only once the server acknowledged it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.dropped = 0
        self._items: deque[Message] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, message: Message) -> None:
        """Queue a message; over the bound, the oldest is dropped and counted."""
        with self._lock:
            self._items.append(message)
            while len(self._items) > self.size:
                self._items.popleft()
                self.dropped += 1

    def peek(self, n: int) -> list[Message]:
        """The oldest `n` messages, left in place."""
        with self._lock:
            return [self._items[i] for i in range(min(n, len(self._items)))]

    def done(self, message_id: str) -> None:
        """The server stored a message (or it was a duplicate): forget it."""
        with self._lock:
            if self._items and self._items[0][0] == message_id:
                self._items.popleft()
            else:  # dropped meanwhile, or acknowledged out of order
                for item in self._items:
                    if item[0] == message_id:
                        self._items.remove(item)
                        break
