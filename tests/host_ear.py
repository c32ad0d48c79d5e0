"""What reaches a channel on this host, by either route (a notification the host's listener
forwards, or a wake-up handed over directly: store/meeting.py), heard as a process of the host
hears it: the notes it acts on and those it only looks at."""

from __future__ import annotations

from engine_adapter.store import host_listener


class HostEar:
    def __init__(self, url: str, role: str, channel: str) -> None:
        self.looked: list[str] = []
        self.listener = host_listener.join(url, role, channel, looker=self.looked.append)

    def heard(self, wait: float = 0.5) -> list[str]:
        acted = list(self.listener.notes(timeout=wait))
        looked = list(self.looked)
        self.looked.clear()
        return acted + looked
