"""Rules that keep the code readable for a newcomer: no test edits sys.path (pytest.ini's `pythonpath = .` puts
the repository on it), no test module imports another (shared fixtures live in tests/conftest.py), tests say what
they check rather than which issue asked for it, no function runs over 80 lines in engine/ or over 60 in studio/ and
pages/, no module imports another module's private (underscored) name from engine/, and no status, run kind,
objective or class-preparation part state is compared by its name (the code is parsed, not searched for spellings)."""
import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/: engine/, studio/, pages/ mirror the source; repo/ the whole


def _modules():
    for path in sorted(TESTS.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_test_edits_sys_path():
    edits = [f"{p.name}:{n.lineno}" for p, tree in _modules() for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"
             and p.name != Path(__file__).name]
    assert not edits, f"sys.path used in {edits}; the repository root is already importable (pytest.ini pythonpath)"


def test_no_test_module_imports_another():
    """Shared fixtures live in tests/conftest.py and shared plain helpers in tests/helpers.py; no test module imports
    another test module."""
    local = {p.stem for p in TESTS.rglob("*.py")} - {"helpers"}
    found = []
    for p, tree in _modules():
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            found += [f"{p.name}:{n.lineno} imports {m}" for m in names
                      if m.split(".")[0] in local or (m.split(".")[0] == "tests" and m != "tests.helpers")]
    assert not found, f"{found}: move what is shared into tests/helpers.py or a fixture in tests/conftest.py"


def test_tests_mirror_the_source():
    """Each test file sits in the folder of what it tests: tests/engine/ (and tests/engine/<package>/ for each package
    of engine/), tests/studio/, tests/pages/, or tests/repo/ for the product as a whole (the browser, the docs, the
    rules); shared fixtures only in tests/conftest.py, shared helpers in tests/helpers.py."""
    packages = sorted(p.parent.name for p in (REPO / "engine").glob("*/__init__.py"))
    folders = {"engine", "studio", "pages", "repo", *(f"engine/{k}" for k in packages)}
    loose = [p.name for p in TESTS.glob("*.py") if p.name not in ("conftest.py", "helpers.py")]
    elsewhere = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if str(p.parent.relative_to(TESTS)) not in folders]
    assert not loose and not elsewhere, f"{loose + elsewhere}: move each into tests/engine[/<package>], studio, pages or repo"
    empty = [k for k in packages if not list((TESTS / "engine" / k).glob("test_*.py"))]
    assert not empty, f"engine packages without their tests/engine/<package>/ folder: {empty}"
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test files share a name (pytest imports them by name)"


def test_tests_do_not_point_at_issue_numbers():
    found = [f"{p.name}:{i}" for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if re.search(r"\bissue\s+\d+", line, re.I)]
    assert not found, f"{found}: say what the test checks; the issue tracker is not part of the repository"


REPO = TESTS.parent
LIMITS = {"engine": 80, "studio": 60, "pages": 60}  # lines per function, docstring included


def _sources(*folders):
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            yield path.relative_to(REPO), ast.parse(path.read_text(encoding="utf-8"))


def test_functions_fit_on_a_screen():
    """No function runs over 80 lines in engine/ or over 60 in studio/ and pages/ (pages stay thin; what a form
    computes lives in a studio/ module): a longer one is split into named steps."""
    long = [f"{path}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines, limit {limit})"
            for folder, limit in LIMITS.items() for path, tree in _sources(folder) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]
    assert not long, f"{long}: split each into named steps"


def _engine_module(path: Path) -> str:
    """engine/pretrain.py -> engine.pretrain; engine/tasks/__init__.py -> engine.tasks."""
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_imports(path: Path, tree) -> list:
    """`from engine.x import _name` (or a relative import of an underscored name) in `path`, when engine.x is not the
    module `path` itself is."""
    own = _engine_module(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.ImportFrom):
            continue
        if n.level:  # from .x import _y, resolved against the importing module's package
            base = package.split(".")[: len(package.split(".")) - (n.level - 1)]
            module = ".".join(base + ([n.module] if n.module else []))
        else:
            module = n.module or ""
        if module.split(".")[0] != "engine" or module == own:
            continue
        found += [f"{path}:{n.lineno} imports {a.name} from {module}" for a in n.names
                  if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_engine_module():
    """An underscored name is its module's own business: a module in engine/, studio/ or pages/ that needs one from
    another engine module asks for a public name instead (or the code moves to where it is used)."""
    found = [f for path, tree in _sources("engine", "studio", "pages") for f in _private_imports(path, tree)]
    assert not found, f"{found}: make the name public where it is defined, or move the code that needs it there"


def test_private_import_rule_sees_absolute_and_relative_imports():
    tree = ast.parse("from .heads import _pool\nfrom engine.tasks.glue import _own\nfrom engine import _top, public\n"
                     "from engine.tasks import __version__\n")
    assert _private_imports(Path("engine/tasks/glue.py"), tree) == [
        "engine/tasks/glue.py:1 imports _pool from engine.tasks.heads", "engine/tasks/glue.py:3 imports _top from engine"]


def _named_things():
    """(the names of every status, run kind, objective and class-preparation part state, the module-level names
    bound to those objects), read from their tables: engine.status.STATUSES, engine.commands.RUN_KINDS,
    engine.objectives.OBJECTIVES, engine.classroom.PART_STATES."""
    from engine import classroom, commands, objectives, status
    names, objects = set(), set()
    for module, table in ((status, status.STATUSES), (commands, commands.RUN_KINDS), (objectives, objectives.OBJECTIVES),
                          (classroom, classroom.PART_STATES)):
        names |= set(table)
        objects |= {k for k, v in vars(module).items() if any(v is x for x in table.values())}
    return names, objects


def _spells_a_name(node, names, objects) -> bool:
    """`node` is a string literal that names a status, run kind, objective or part state, a tuple/list/set holding
    one, or the `.name` of one of their objects (`FINISHED.name`, `status.FINISHED.name`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_spells_a_name(e, names, objects) for e in node.elts)
    if isinstance(node, ast.Attribute) and node.attr == "name":
        inner = node.value
        return (isinstance(inner, ast.Name) and inner.id in objects) or (isinstance(inner, ast.Attribute) and inner.attr in objects)
    return False


def named_comparisons(path: Path, names, objects) -> list:
    """Every `==`, `!=`, `in`, `not in` (and `case`) in the file `path` with a side that spells a status, run kind,
    objective or part state name (`_spells_a_name`), as "path:line: code"."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in n.ops):
            sides = [n.left, *n.comparators]
        elif isinstance(n, ast.MatchValue):
            sides = [n.value]
        else:
            continue
        if any(_spells_a_name(s, names, objects) for s in sides):
            found.append(f"{path}:{n.lineno}: {ast.unparse(n)}")
    return found


def test_no_status_run_kind_or_objective_is_compared_by_name():
    """A status, a run kind, an objective and a class-preparation part state are each described once
    (engine/status.py, engine/commands.py, engine/objectives.py, engine/classroom.py): code asks the object
    (`status_of(s) is FINISHED`, `status_of(s).resumable`, `kind_of(info.get("kind")) is PRETRAIN`, `.checkpoints`,
    `objective(name).nsp`, `part_state_of(r["state"]) is DONE`) instead of comparing its name, spelled or as
    `FINISHED.name`. A word spelled like one that means something else (a bench scenario, a head, a command) gets its
    own named constant or object where it is decided (engine.bench.scenarios.SCENARIOS, engine.objectives.MLM_HEAD,
    engine.commands.written_by)."""
    names, objects = _named_things()
    found = [f.removeprefix(f"{REPO}/") for folder in ("engine", "studio", "pages") for p in sorted((REPO / folder).rglob("*.py"))
             for f in named_comparisons(p, names, objects)]
    assert not found, (f"{len(found)} comparisons by name: {found}; ask the object (engine.status.status_of, "
                       "engine.commands.kind_of, engine.objectives.objective, engine.classroom.part_state_of)")


def test_the_name_scan_sees_each_form(tmp_path):
    names, objects = _named_things()
    assert {"finished", "dead", "pretrain", "layers", "mlm+nsp", "ltr", "done", "foreign"} <= names
    assert {"FINISHED", "DEAD", "PRETRAIN", "LAYERS", "MLM_NSP", "MLM", "DONE", "FOREIGN"} <= objects
    caught = ['s == "finished"', '"pretrain" != kind', 'o in ("mlm+nsp", "x")', 'o not in ["ltr"]', 'k in {"features"}',
              'argv[:1] == ["pretrain"]', 's == FINISHED.name', 's in (RUNNING.name, FAILED.name)', 'status.DEAD.name != s',
              'a < b == "cancelled"', 'r["state"] != DONE.name', 'x in [("todo", 1)]', 'match s:\n    case "queued":\n        pass']
    missed = ['status_of(s) is FINISHED', 'kind_of(k).checkpoints', 'x == "other"', 'd["finished"] = 1', 's = FINISHED.name',
              'write(status=CANCELLED.name)', 'o == OTHER.name', 'f"{FINISHED.name}" + s', 'k in ("layers_x", "mlm_acc")']
    for i, code in enumerate(caught + missed):
        (tmp_path / f"c{i}.py").write_text(code + "\n")
    hits = [bool(named_comparisons(tmp_path / f"c{i}.py", names, objects)) for i in range(len(caught + missed))]
    assert hits == [True] * len(caught) + [False] * len(missed)
