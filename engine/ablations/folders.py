"""Study folders: `<runs_root>/studies/<name>/study.json` (the study, its jobs and their recorded states) and the
jobs' run folders under `<runs_root>/studies/<name>/runs/`.
"""
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from engine.ablations.study import Study
from engine.errors import EngineError
from engine.fileio import atomic_write_json
from engine.records import STUDY_JSON
from engine.runs import safe_run_name


def studies_root(runs_root=None) -> Path:
    if runs_root is None:
        runs_root = os.environ.get("BERT_STUDIO_RUNS") or "runs"
    return Path(runs_root).absolute() / "studies"


def study_dir_name(study: Study, name: str = None) -> str:
    """The folder name of a study: `name`, else the study's name at any scale (`ablate run NAME --runs-root DIR`
    writes DIR/studies/NAME; study.json says whether it is the classroom scale)."""
    return safe_run_name(name or study.name)


def new_study_dir(study: Study, runs_root=None, name: str = None) -> Path:
    """A fresh folder <runs_root>/studies/<study_dir_name>; an existing name gets -2, -3, ..."""
    root = studies_root(runs_root)
    base = study_dir_name(study, name)
    path, i = root / base, 2
    while path.exists():
        path, i = root / f"{base}-{i}", i + 1
    path.mkdir(parents=True)
    return path


def write_study(study_dir, study: Study, jobs: list, **extra) -> dict:
    data = {"study": study.to_dict(), "jobs": [asdict(j) for j in jobs], "created": _now(), **extra}
    atomic_write_json(Path(study_dir) / STUDY_JSON, data)
    return data


def read_study(study_dir) -> dict:
    path = Path(study_dir) / STUDY_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineError(f"{study_dir} is not a study folder (no {STUDY_JSON}); give a folder under <runs>/studies/") from None
    except ValueError as e:
        raise EngineError(f"{path} is not valid JSON ({e}); fix or delete it") from e
    if not isinstance(data, dict) or "study" not in data:
        raise EngineError(f"{path} does not describe a study; give a folder written by `ablate run`")
    return data


def update_job(study_dir, key: str, **fields) -> None:
    """Merge fields into one job's entry of study.json (the only writer is the launcher, one at a time)."""
    data = read_study(study_dir)
    for j in data["jobs"]:
        if j["key"] == key:
            j.update(fields)
    atomic_write_json(Path(study_dir) / STUDY_JSON, data)


def list_studies(runs_root=None) -> list:
    """[{name, path, study, title, created, jobs}] for every study folder, newest first."""
    root = studies_root(runs_root)
    out = []
    if root.is_dir():
        for d in root.iterdir():
            if (d / STUDY_JSON).is_file():
                try:
                    data = read_study(d)
                except EngineError:
                    continue
                s = data["study"]
                out.append({"name": d.name, "path": str(d), "study": s.get("name"), "title": s.get("title"),
                            "created": data.get("created", ""), "jobs": len(data.get("jobs", []))})
    out.sort(key=lambda r: (r["created"], r["name"]), reverse=True)
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
