"""engine/progress.py: the one progress display of the long commands: a bar on a terminal, plain periodic lines with
the time left in a log, nothing with --quiet."""
import io

from engine.progress import Progress, time_left_text


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_log_gets_a_plain_line_every_interval_with_the_rate_and_the_time_left():
    clock, out = Clock(), io.StringIO()
    p = Progress(3000, "pretrain", "step", initial=600, stream=out, every=60, clock=clock)  # a resumed run at 600
    for _ in range(20):  # 2 steps a second for 60 s: one line
        clock.t += 3.0
        p.update(6)
    lines = out.getvalue().splitlines()
    assert lines == ["pretrain: 720/3000 steps (24%), 2.00 steps/s, about 19 min left"]  # (3000-720)/2 s = 19 min
    clock.t += 10
    p.update(4)
    assert len(out.getvalue().splitlines()) == 1  # not before the next interval
    p.close()
    assert out.getvalue().splitlines()[-1].startswith("pretrain: 724/3000 steps (24%)")
    p.update(1)
    p.close()
    assert len(out.getvalue().splitlines()) == 2  # closed: nothing more


def test_quiet_writes_nothing_and_a_terminal_gets_a_bar():
    clock, out = Clock(), io.StringIO()
    with Progress(10, "finetune", enabled=False, stream=out, every=0, clock=clock) as p:
        for _ in range(10):
            clock.t += 1
            p.update()
    assert out.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    with Progress(10, "features", "text", stream=tty, every=0) as p:
        assert p.bar is not None
        p.update(10)
    assert "features" in tty.getvalue() and "10/10" in tty.getvalue()


def test_time_left_reads_in_seconds_minutes_or_hours():
    assert (time_left_text(40), time_left_text(14 * 60), time_left_text(9000)) == \
        ("about 40 s left", "about 14 min left", "about 2.5 h left")
