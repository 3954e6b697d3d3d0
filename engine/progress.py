"""Progress of a long command, one way for all of them (pretrain, finetune, features, prepare, layers, a study run
in the foreground): on a terminal a tqdm bar with its rate and the time left; in a log (output redirected, a queued
job's log) a plain line every `every` seconds and one at the end, e.g.

    pretrain: 1200/3000 steps (40%), 2.10 steps/s, about N min left

The time left is the steps to go at the average rate since this process started counting (a resumed run's earlier
steps do not count towards the rate). `--quiet` switches both off (`enabled=False`).
"""
import sys
import time


def time_left_text(seconds: float) -> str:
    """The time left in the unit that reads best: seconds under 90 s, minutes under 90 min, else hours."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min left"
    return f"about {seconds / 3600:.1f} h left"


class Progress:
    """`Progress(total, what, unit)`: `update(n)` after each unit of work, `close()` at the end (or use it as a
    context manager). `stream`: where it writes (stderr); `every`: seconds between plain lines; `clock`: the time
    source (tests pass their own)."""

    def __init__(self, total: int, what: str, unit: str = "step", initial: int = 0, enabled: bool = True,
                 stream=None, every: float = 60.0, clock=time.monotonic):
        self.total, self.what, self.unit, self.done = int(total), what, unit, int(initial)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled, self.every, self.clock = enabled, float(every), clock
        self.start_done, self.t0 = self.done, clock()
        self.last_line = self.t0
        self.notes = {}  # the latest figures to show beside the count (a loss, the trial): `note`
        self.bar = None
        if enabled and _is_terminal(self.stream):
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, initial=self.done, file=self.stream, desc=what, unit=unit,
                            dynamic_ncols=True, mininterval=1.0)

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
        elif self.clock() - self.last_line >= self.every:
            self.line()

    def note(self, **figures) -> None:
        """Figures shown beside the count from now on (the bar's postfix; the end of a plain line)."""
        self.notes = figures
        if self.enabled and self.bar is not None:
            self.bar.set_postfix(**figures, refresh=False)

    def line(self) -> str:
        """Write (and return) the plain progress line."""
        now = self.clock()
        self.last_line = now
        counted, elapsed = self.done - self.start_done, max(now - self.t0, 1e-9)
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        text = f"{self.what}: {self.done}/{self.total} {self.unit}s{share}"
        if counted > 0:
            rate = counted / elapsed
            text += f", {rate:.2f} {self.unit}s/s"
            if self.total and self.done < self.total:
                text += f", {time_left_text((self.total - self.done) / rate)}"
        if self.notes:
            text += " (" + ", ".join(f"{k} {v}" for k, v in self.notes.items()) + ")"
        print(text, file=self.stream, flush=True)
        return text

    def close(self, final_line: bool = True) -> None:
        """End it: the bar closed, or in a log the last line (`final_line`: off where the command prints its own
        summary)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif final_line and self.done > self.start_done:
            self.line()
        self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
