"""The one table of measured facts (engine/measured.py): README.md's figures are the table's, the lessons, the time
estimate and the pages read it, and no other code in engine/, studio/ or pages/ types a measured figure or dates."""
import re
from pathlib import Path

import pytest

from engine import measured
from engine.ablations import lessons, timing

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
CODE = sorted(p for d in ("engine", "studio", "pages") for p in (REPO / d).rglob("*.py"))
TABLE = REPO / "engine" / "measured.py"


def every_measurement():
    yield from measured.FACTS.values()
    for s in measured.STUDIES.values():
        yield s.minutes
    for lesson in measured.LESSONS.values():
        yield lesson.minutes


def test_every_measurement_names_a_known_machine_a_date_and_a_command():
    for m in every_measurement():
        assert m.machine in measured.MACHINES
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", m.date)
        assert m.command.startswith(("python -m engine", "torchrun"))


def test_readme_table_is_the_generated_one():
    start, end = README.index(measured.README_START), README.index(measured.README_END)
    assert README[start:end + len(measured.README_END)] == measured.readme_table(), \
        "README.md's measured table is stale: run `python -m engine measured --write README.md`"


def test_readme_states_no_figure_outside_the_table():
    """Minutes, speed ratios, percentages and accuracies in README.md are in the generated section only; any such
    figure elsewhere must be one the table holds."""
    start, end = README.index(measured.README_START), README.index(measured.README_END)
    rest = README[:start] + README[end:]
    known = {m.text() for m in every_measurement()} | {m.text(d) for m in every_measurement() for d in (0, 1, 2, 3)}
    figures = re.findall(r"\b\d+(?:\.\d+)? ?min(?:utes)?\b|\b\d+\.\d+x\b|\b0\.\d{2,3}\b|\b\d+(?:\.\d+)?%", rest)
    unknown = [f for f in figures if f.replace(" minutes", " min") not in known]
    assert not unknown, f"README.md states figures that are not in engine/measured.py: {unknown}"


def test_no_dates_stops_or_issue_numbers_in_code_outside_the_table():
    pattern = re.compile(r"stop [0-9]+|issue [0-9]+|20[0-9]{2}-[0-9]{2}-[0-9]{2}")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in CODE if p != TABLE
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, f"dates, stop or issue numbers outside engine/measured.py: {hits}"


@pytest.mark.parametrize("key", sorted(measured.STUDIES))
def test_each_study_time_is_written_once_in_the_code(key):
    figure = f"{measured.study(key).minutes.value:g}"  # the number as written (87 or 87.0), not a longer one (87.9)
    where = [str(p.relative_to(REPO)) for p in CODE if re.search(rf"(?<![\d.]){re.escape(figure)}(\.0+)?(?!\.?\d)",
                                                                  p.read_text(encoding="utf-8"))]
    assert where == ["engine/measured.py"], f"{figure} min is written in {where}"


def test_time_estimate_and_lessons_read_the_table():
    for key, s in measured.STUDIES.items():
        ref = timing.REFERENCE_MINUTES[key]
        machine = measured.MACHINES[s.minutes.machine]
        assert (ref.minutes, ref.date, ref.step_ms, ref.machine) == (s.minutes.value, s.minutes.date,
                                                                     machine.check_ms, machine.name)
    assert {lesson.key for lesson in lessons.LESSONS} == set(measured.LESSONS)
    for lesson in lessons.LESSONS:
        m = measured.lesson(lesson.key)
        assert lesson.shows == m.shows and m.minutes.text() in lesson.cost and m.minutes.date in lesson.cost
    # the default lesson is the classroom study: one measurement, not two copies of it
    assert measured.lesson("table5").minutes is measured.study("pretraining-tasks").minutes


def test_findings_verdicts_are_the_verdict_module_s_words():
    from engine.ablations.verdict import VERDICTS
    for s in measured.STUDIES.values():
        assert all(f.verdict in VERDICTS for f in s.findings)
        assert all(set(row) == set(next(iter(s.table.values()))) for row in s.table.values())


def test_probe_reading_quotes_the_table():
    from engine.probe_baselines import reading
    text = " ".join(reading({"cloze_top1": 0.0, "nsp_acc": 0.5, "nsp_n": 30}, {"unigram_top1": 0.0}))
    for key in ("classroom_run.mask_accuracy", "classroom_run.nsp_accuracy", "probe_ready.nsp_accuracy"):
        assert measured.fact(key).text() in text


def test_the_cli_prints_every_fact(capsys):
    assert measured.main([]) == 0
    out = capsys.readouterr().out
    assert all(f"{key}: " in out for key in measured.FACTS)
    assert measured.main(["--readme"]) == 0 and measured.readme_table() in capsys.readouterr().out


def test_write_replaces_only_the_generated_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{measured.README_START}\nold 9.9 min\n{measured.README_END}\nrest\n", encoding="utf-8")
    assert measured.main(["--write", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == f"intro\n{measured.readme_table()}\nrest\n"
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="no generated table"):
        measured.main(["--write", str(tmp_path / "missing.md")])


DOCS = [REPO / "docs" / "teaching.md"]


def test_code_help_text_and_the_teaching_plan_state_no_time_outside_the_table():
    """A measured time in engine/, studio/, pages/ (help text, docstrings, comments, captions) or docs/teaching.md is
    one the table holds: a figure to one decimal ("8.6 min") exactly, an "about N minutes" rounded from one. Plans
    ("a 50-minute class") are not measurements; lab notes keep their history."""
    known = {m.text() for m in every_measurement()}
    rounded = {round(m.value) for m in every_measurement() if m.unit == "min"}
    bad = []
    for p in [*CODE, *DOCS]:
        if p != TABLE:  # a string literal split over lines is read joined: quotes and line breaks as one space
            text = re.sub(r'"\s*\n\s*(?:f|rf|r)?"', "", p.read_text(encoding="utf-8"))
            bad += [f"{p.relative_to(REPO)}: {f}" for f in unknown_times(text, known, rounded)]
    assert not bad, f"times not in engine/measured.py (read them from measured.fact): {bad}"


def unknown_times(text: str, known: set, rounded: set) -> list:
    text = " ".join(text.split())
    out = [f for f in re.findall(r"(?<![\d.])\d+\.\d+ ?min(?:utes)?\b", text)
           if re.sub(r" ?minutes$", " min", f).replace("min", " min").replace("  ", " ") not in known]
    return out + [f"about {n} minutes" for n in re.findall(r"\babout (\d+) ?min(?:utes)?\b", text) if int(n) not in rounded]


def test_every_commands_help_states_no_time_outside_the_table():
    """What `python -m engine <command> --help` prints, as a user reads it."""
    import importlib
    import io
    from contextlib import redirect_stdout
    from engine.commands import COMMANDS
    known = {m.text() for m in every_measurement()}
    rounded = {round(m.value) for m in every_measurement() if m.unit == "min"}
    bad, seen = {}, 0
    for name, (module, _) in COMMANDS.items():
        out = io.StringIO()
        with redirect_stdout(out), pytest.raises(SystemExit):  # argparse exits after printing the help
            importlib.import_module(module).main(["--help"])
        seen += "usage" in out.getvalue()
        found = unknown_times(out.getvalue(), known, rounded)
        if found:
            bad[name] = found
    assert seen >= len(COMMANDS) - 1  # every command printed its help (one may print its own usage line)
    assert not bad, f"--help states times not in engine/measured.py: {bad}"
