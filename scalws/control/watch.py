"""`watch_config`: the master reloads by itself when its configuration
file's content changes (docs/operations.md, "Reload").

The file is read every `watch_config` seconds and its bytes hashed: a
change of content counts, whatever made it (an editor's write or rename,
`kubectl` updating a ConfigMap, whose volume swaps a `..data` symlink to a
new folder, a configuration-management run), and a touch without a change
does not. What a reload then does is what SIGHUP does, with the same
checks (master.reload): a file that does not load is refused, its
file:line in the error log, and the running configuration keeps serving.

A content is tried once, whatever the outcome: a broken file is reported
once, not every interval, and the next change of content is tried again.
A file that cannot be read (removed, a dangling symlink during a swap) is
not a change: it is reported once, and the watch waits for it to come back.
"""
from __future__ import annotations

import time

from scalws.control.logs import log


def digest(path: str) -> bytes | None:
    """sha256 of the file's content, None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            import hashlib  # here: importing it initialises OpenSSL (3 MiB mapped)
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return None


class ConfigWatch:
    def __init__(self, path: str, interval: float, loaded: bytes):
        self.path = path
        self.interval = interval
        self.tried = loaded          # the content last loaded or refused
        self.unreadable = False      # said once until it is readable again
        self.due = time.monotonic() + interval

    def next_due(self) -> float:
        return self.due

    def changed(self, now: float) -> bool:
        """Whether a check is due and finds a content not tried yet."""
        if now < self.due:
            return False
        self.due = now + self.interval
        d = digest(self.path)
        if d is None:
            if not self.unreadable:
                log.warning("watch_config: cannot read %s; serving the current "
                            "configuration until it is back", self.path)
                self.unreadable = True
            return False
        self.unreadable = False
        if d == self.tried:
            return False
        self.tried = d
        return True

    def tried_now(self, content: bytes | None) -> None:
        """A reload (SIGHUP or this watch) read `content`: not to be tried again."""
        if content is not None:
            self.tried = content
