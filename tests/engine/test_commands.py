"""The command table (engine/commands.py): every command `python -m engine` lists dispatches to a module's
`main(argv)`, and the help and the job queue read the same names."""
import importlib

from engine import jobs
from engine.commands import COMMANDS, help_text


def test_every_command_has_a_main_and_a_help_line():
    for name, (module, what) in COMMANDS.items():
        assert callable(importlib.import_module(module).main), name
        assert f"  {name:<11} {what}" in help_text()
    assert jobs.ENGINE_COMMANDS == tuple(COMMANDS)


def test_an_unknown_command_is_one_line_naming_the_commands(capsys):
    from engine.__main__ import run
    assert run(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(name in err for name in COMMANDS)
