"""Study folders: `<runs_root>/studies/<name>/study.json` (the study, its jobs and their recorded states) and the
jobs' run folders under `<runs_root>/studies/<name>/runs/`.
"""
import json
import os
import time
from dataclasses import asdict, fields
from pathlib import Path

from engine.ablations.paper import STUDIES
from engine.ablations.study import Evaluation, FeatureArgs, FinetuneArgs, Study, Variant
from engine.errors import EngineError
from engine.pretraining.config import PretrainConfig
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
    damage = what_is_damaged(data)
    if damage:
        raise EngineError(f"{path} is damaged: {damage}; restore it from a backup, or delete {Path(study_dir)} and "
                          "run the study again")
    return data


JOB_FIELDS = {"key": str, "kind": str, "argv": list, "out": str, "variant": str, "seed": int}  # what every reader needs


def what_is_damaged(data: dict):
    """What is wrong with a study.json `data` that every reader of it would trip on (a hand edit, a torn copy), in a
    few words; None when nothing is. The study's settings are checked where they are read (`study_of`)."""
    study = data.get("study")
    if not isinstance(study, dict):
        return f'"study" is {type(study).__name__}, not the study\'s settings'
    if not isinstance(study.get("name"), str):
        return 'the study has no "name"'
    if not isinstance(data.get("jobs"), list):
        return 'it has no "jobs" list'
    for i, j in enumerate(data["jobs"]):
        if not isinstance(j, dict):
            return f"job {i + 1} is {type(j).__name__}, not an object"
        for k, kind in JOB_FIELDS.items():
            if not isinstance(j.get(k), kind) or (kind is int and isinstance(j.get(k), bool)):
                return f'job {i + 1} ({j.get("key", "no key")}) has no "{k}" ({kind.__name__})'
    return None


def study_from_dict(d: dict) -> Study:
    """Rebuild a Study from its study.json form (asdict); what is not saved (the finding check, the contrasts) is
    taken back from the built-in study of the same name."""
    def mk(cls, x):
        if x is None:
            return None
        known = {f.name for f in fields(cls)}
        # None: the field's default, but for a field whose default is a value (phase2_seq_len None: one phase)
        kw = {k: v for k, v in x.items() if k in known and (v is not None or getattr(cls, k, None) is not None)}
        for k in ("mask_ratios", "lr", "batch_size", "epochs"):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        return cls(**kw)

    def variant(x):
        pre = dict(x.get("pretrain") or {})
        if isinstance(pre.get("mask_ratios"), list):
            pre["mask_ratios"] = tuple(pre["mask_ratios"])
        return Variant(name=x["name"], pretrain=pre, finetune=dict(x.get("finetune") or {}),
                       features=mk(FeatureArgs, x.get("features")), reuse=x.get("reuse"), note=x.get("note", ""))

    def evaluation(x):
        return Evaluation(name=x["name"], task=x["task"], metric=x["metric"], train=x.get("train"), dev=x.get("dev"),
                          features=mk(FeatureArgs, x.get("features")))

    builtin = STUDIES[d["name"]]() if d["name"] in STUDIES else None
    check = builtin.finding_check if builtin else None
    contrasts = builtin.contrasts if builtin else ()
    return Study(name=d["name"], title=d.get("title", d["name"]), description=d.get("description", ""),
                 finding=d.get("finding", ""), base=mk(PretrainConfig, d["base"]), finetune=mk(FinetuneArgs, d["finetune"]),
                 variants=tuple(variant(v) for v in d["variants"]), evaluations=tuple(evaluation(e) for e in d["evaluations"]),
                 seeds=tuple(d.get("seeds") or (0,)), model=d.get("model"),
                 checkpoint_steps=tuple(d.get("checkpoint_steps") or ()), pretrain_columns=tuple(d.get("pretrain_columns") or ()),
                 scale=d.get("scale") or ("classroom" if d.get("classroom") else "paper"),  # older study.json: a flag
                 budget=d.get("budget") or "steps",
                 budget_minutes=d.get("budget_minutes"), feature_epochs=d.get("feature_epochs"),
                 finding_check=check, contrasts=contrasts)


def study_of(study_dir, data: dict) -> Study:
    """The Study a study.json `data` describes (`study_from_dict`); settings that do not make
    one are one line naming the file."""
    try:
        return study_from_dict(data["study"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise EngineError(f"{Path(study_dir) / STUDY_JSON} is damaged: its study's settings do not make a study "
                          f"({type(e).__name__}: {e}); restore it from a backup, or delete {Path(study_dir)} and run "
                          "the study again") from None


def update_job(study_dir, key: str, **fields) -> None:
    """Merge fields into one job's entry of study.json (the only writer is the launcher, one at a time)."""
    data = read_study(study_dir)
    for j in data["jobs"]:
        if j["key"] == key:
            j.update(fields)
    atomic_write_json(Path(study_dir) / STUDY_JSON, data)


def list_studies(runs_root=None) -> list:
    """[{name, path, study, title, created, jobs, error}] for every study folder, newest first. A study whose
    study.json cannot be read is listed too, with `error` (one line naming the file and what is wrong) as its title
    and no jobs, so one bad study costs one line and the others still list."""
    root = studies_root(runs_root)
    out = []
    if root.is_dir():
        for d in root.iterdir():
            if (d / STUDY_JSON).is_file():
                try:
                    data = read_study(d)
                    study_of(d, data)  # settings that make no study: listed as what is wrong, as show would say
                except EngineError as e:
                    out.append({"name": d.name, "path": str(d), "study": None, "title": str(e), "created": "",
                                "jobs": 0, "error": str(e)})
                    continue
                s = data["study"]
                out.append({"name": d.name, "path": str(d), "study": s["name"], "title": s.get("title"),
                            "created": str(data.get("created") or ""), "jobs": len(data["jobs"]), "error": None})
    out.sort(key=lambda r: (r["created"], r["name"]), reverse=True)
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
