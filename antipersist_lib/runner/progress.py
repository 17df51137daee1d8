"""The progress bars of a run: one per iteration's training and held-out phase, with a line that says what the
model server is doing (calls made, replayed from the cache, how long since the last one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from antipersist_lib.serving.ledger import Ledger

#: how often a progress bar's activity line is refreshed while an episode runs (episodes take minutes)
ACTIVITY_REFRESH_S = 5.0


def ledger_activity(ledger: Ledger) -> Callable[[], str]:
    """A progress bar's activity line: the model calls this invocation made, how many the response cache
    answered, and how long ago the last one ended (a stalled server shows as a growing age)."""

    def line() -> str:
        calls, cached, last = ledger.since_open()
        age = "" if last is None else f", last {time.time() - last:.0f} s ago"
        return f"{calls} calls ({cached} cached){age}"

    return line


class Progress:
    """A tqdm bar when tqdm is installed and progress is on; silent otherwise. With ``activity``, a thread
    refreshes the bar's postfix every ``ACTIVITY_REFRESH_S``, so the line moves while an episode runs."""

    def __init__(self, total: int, desc: str, enabled: bool, activity: Callable[[], str] | None = None) -> None:
        self.bar = None
        self._stop = threading.Event()
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=desc, leave=False)
            except ImportError:
                pass
        if self.bar is not None and activity is not None:
            threading.Thread(target=self._refresh, args=(activity,), name="progress", daemon=True).start()

    def _refresh(self, activity: Callable[[], str]) -> None:
        while not self._stop.wait(ACTIVITY_REFRESH_S):
            bar = self.bar
            if bar is None:
                return
            try:
                bar.set_postfix_str(activity(), refresh=True)
            except Exception:  # a closed bar: stop quietly
                return

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()
