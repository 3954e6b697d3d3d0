"""Experiment trackers: a run's metrics, settings and tags also sent to TensorBoard and MLflow (`--report-to`).

metrics.jsonl stays the run's record, the one every page, study and notebook reads; a tracker gets a copy of each
record as it is appended (engine.runs.Run.log for fine-tuning and features, the pre-training loop's `_record`), so
that `tensorboard --logdir runs` and `mlflow ui` show the runs beside a researcher's other experiments. Not in the
paper: infrastructure.

- TensorBoard (`TensorBoardTracker`): event files in the run folder (torch.utils.tensorboard.SummaryWriter). Every
  number of a record is a scalar against the record's step, tagged `<labels>/<key>`, the labels being the record's
  text fields (`split`, `phase`, `combine`: `train/loss`, `eval/eval_mlm_acc`, `concat/score`); the run's settings
  are its HParams session. Only the session is written, no experiment summary, so TensorBoard's HParams view gathers
  the sessions of every run under the folder it is given: a study's runs side by side. A resumed run purges the
  events logged after the step it continues from (SummaryWriter's purge_step), as metrics.jsonl is cut back.
- MLflow (`MLflowTracker`): one MLflow run per engine run, in the experiment `bert-studio`, or, for a study's job,
  in the experiment named after its study folder, tagged with its variant, seed, job and evaluation. Metrics by
  step (the same keys as TensorBoard's tags), settings as params (both keep those the run started with), tags `kind`, `run_dir` and, at the end,
  `checkpoint` (the run folder's final checkpoint). The store is `MLFLOW_TRACKING_URI`, else
  `sqlite:///<runs>/mlflow.db` beside the run folders. The MLflow run's id is kept in the run folder's
  trackers.json, so a resume (`--resume`, an elastic restart) continues the same MLflow run and skips the points it
  already holds.

Both are optional (requirements-trackers.txt, not requirements.txt): naming one that is not installed is one line
with the pip command. Every call to a tracker is guarded (`Trackers`): one that fails (a full disk, a server gone)
warns once on stderr, the run's log, and is dropped for the rest of the run, which goes on with metrics.jsonl
untouched. Trackers start at the run's first record, after its lock is held and a resume has cut metrics.jsonl back.
"""
import argparse
import importlib.util
import json
import os
import re
import shlex
import stat
import sys
import time
from pathlib import Path
from typing import Protocol

from engine import runs
from engine.errors import EngineError
from engine.fileio import atomic_write_json
from engine.records import METRICS_LABELS, STUDY_JSON

PIP = "pip install -r requirements-trackers.txt"
TRACKER_FILE = "trackers.json"  # in the run folder: the MLflow run that this run reports to
TRACKER_FILES = (TRACKER_FILE, "events.out.tfevents.*")  # what the trackers write into a run folder
EXPERIMENT = "bert-studio"  # the MLflow experiment of a run that is not a study's job
MAX_STUDY_JSON = 16 * 2 ** 20
_DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow stores that need sqlalchemy and alembic
_RUN_ID = re.compile(r"[0-9a-f]{32}")
_MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}
HELP = ("also send the metrics, settings and tags to tensorboard, mlflow or both (tensorboard,mlflow): event files in "
        "the run folder, an MLflow run in $MLFLOW_TRACKING_URI or sqlite:///<runs>/mlflow.db; optional: " + PIP)


class Tracker(Protocol):
    """What a run hands a tracker (one class per library below)."""

    def log_params(self, params: dict) -> None: ...

    def log_metrics(self, step: int, metrics: dict) -> None: ...

    def set_tags(self, tags: dict) -> None: ...

    def close(self, status: str) -> None: ...


# ---------------------------------------------------------------------------------------------------------
# what a run's records and settings become

def record_scalars(record: dict) -> dict:
    """The numbers of a metrics.jsonl record under their tracker keys: `<labels>/<key>`, the labels being its text
    fields (engine.records.METRICS_LABELS) in that order; "step" is the x axis, not a metric."""
    prefix = "".join(f"{record[k]}/" for k in METRICS_LABELS if isinstance(record.get(k), str))
    return {prefix + k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def flat_settings(config: dict) -> dict:
    """A run's settings as tracker parameters: numbers as they are; text, booleans and None as text; lists
    comma-joined (as on a command line); a nested dict as JSON."""
    out = {}
    for k, v in (config or {}).items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = json.dumps(v, sort_keys=True, default=str)
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            v = str(v)
        out[str(k)] = v
    return out


def next_step(run_dir) -> int:
    """The first step a run logs from now on: one past the last step in its metrics.jsonl (0 when it has none)."""
    return max((int(r["step"]) for r in runs.read_metrics(run_dir)), default=-1) + 1


def final_checkpoint(run_dir):
    """The run folder's final checkpoint: its newest complete checkpoints/step-N, else a fine-tune's best/, else None."""
    ck = runs.latest_checkpoint(run_dir)
    best = Path(run_dir) / "best"
    return ck if ck is not None else best if (best / "config.json").is_file() else None


def _study_jobs(study_dir: Path) -> list:
    """The jobs listed in a study folder's study.json ([] when it is not a readable regular file)."""
    path = study_dir / STUDY_JSON
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_STUDY_JSON:
            return []
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return []
    jobs = data.get("jobs") if isinstance(data, dict) else None
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def study_job(run_dir) -> tuple:
    """(runs root, MLflow experiment, tags) of a run folder. A study's job (<root>/studies/<study>/runs/<job>, listed in
    its study.json, engine.ablations.folders) is in the experiment named after its study folder, tagged with its
    study, variant, seed, job and evaluation; any other run is in EXPERIMENT, its runs root the folder holding it."""
    run_dir = Path(run_dir).absolute()
    study_dir = run_dir.parent.parent
    if run_dir.parent.name == "runs" and study_dir.parent.name == "studies":
        for job in _study_jobs(study_dir):
            if job.get("out") == f"runs/{run_dir.name}":
                tags = {"study": study_dir.name, "variant": job.get("variant"), "seed": job.get("seed"),
                        "job": job.get("key"), "evaluation": job.get("evaluation")}
                return study_dir.parent.parent, study_dir.name, {k: str(v) for k, v in tags.items() if v is not None}
    return run_dir.parent, EXPERIMENT, {}


def tracking_uri(root) -> str:
    """The MLflow store: $MLFLOW_TRACKING_URI, else the SQLite file mlflow.db in the runs root `root`."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(root).absolute() / 'mlflow.db'}"


def open_commands(root) -> list:
    """The commands that open the runs under the runs root `root` in each tracker."""
    return [f"tensorboard --logdir {shlex.quote(str(Path(root).absolute()))}",
            f"mlflow ui --backend-store-uri {shlex.quote(tracking_uri(root))}"]


# ---------------------------------------------------------------------------------------------------------
# the trackers, one class per library

class TensorBoardTracker:
    """Event files in the run folder: scalars by step, the settings as the run's HParams session."""
    pip = "tensorboard"

    @staticmethod
    def needs() -> tuple:
        return ("tensorboard",)

    def __init__(self, run_dir: Path, first_step: int, **_):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(str(run_dir), purge_step=first_step, flush_secs=10)

    def log_params(self, params: dict) -> None:
        from torch.utils.tensorboard.summary import hparams
        _, session_start, _ = hparams(params, {})
        self.writer.file_writer.add_summary(session_start)

    def log_metrics(self, step: int, metrics: dict) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)

    def set_tags(self, tags: dict) -> None:
        pass  # TensorBoard has no run tags; the run is its folder

    def close(self, status: str) -> None:
        self.writer.close()


class MLflowTracker:
    """One MLflow run per engine run (its id in the run folder's trackers.json): params, metrics by step, tags."""
    pip = "mlflow-skinny sqlalchemy alembic"

    @staticmethod
    def needs() -> tuple:
        scheme = tracking_uri(".").split(":", 1)[0].split("+", 1)[0]
        return ("mlflow",) + (("sqlalchemy", "alembic") if scheme in _DB_SCHEMES else ())

    def __init__(self, run_dir: Path, root: Path, experiment: str, **_):
        import logging
        for name in ("mlflow", "alembic"):  # their INFO lines (database migrations) are not the run's log
            logging.getLogger(name).setLevel(logging.WARNING)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # a server gone costs seconds, not minutes
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        from mlflow.tracking import MlflowClient
        self.run_dir, self.root, self.uri = Path(run_dir), Path(root), tracking_uri(root)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.params, self.seen = {}, {}  # what a continued MLflow run already holds
        self.run_id = self._continued() or self._new_run(experiment)

    def _continued(self):
        """The id of the MLflow run this run folder reported to before (trackers.json), when it is still there."""
        saved = _read_tracker_file(self.run_dir).get("mlflow")
        if not isinstance(saved, dict) or saved.get("tracking_uri") != self.uri or not _RUN_ID.fullmatch(str(saved.get("run_id"))):
            return None
        try:
            run = self.client.get_run(saved["run_id"])
        except Exception:  # deleted from the store: a new MLflow run
            return None
        if run.info.lifecycle_stage != "active":
            return None
        self.params = dict(run.data.params)
        self.seen = {k: {m.step for m in self.client.get_metric_history(run.info.run_id, k)} for k in run.data.metrics}
        self.client.update_run(run.info.run_id, status="RUNNING")
        return run.info.run_id

    def _new_run(self, experiment: str) -> str:
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            where = None if os.environ.get("MLFLOW_TRACKING_URI") else (self.root / "mlflow-artifacts").absolute().as_uri()
            try:
                exp_id = self.client.create_experiment(experiment, artifact_location=where)
            except Exception:  # another job of the study created it first
                exp_id = self.client.get_experiment_by_name(experiment).experiment_id
        else:
            exp_id = exp.experiment_id
        run_id = self.client.create_run(exp_id, run_name=self.run_dir.name).info.run_id
        atomic_write_json(self.run_dir / TRACKER_FILE, {"mlflow": {"tracking_uri": self.uri, "run_id": run_id}})
        return run_id

    def log_params(self, params: dict) -> None:
        from mlflow.entities import Param
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in self.params]
        for i in range(0, len(new), 100):  # MLflow takes at most 100 params a call
            self.client.log_batch(self.run_id, params=new[i:i + 100])

    def log_metrics(self, step: int, metrics: dict) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        points = [Metric(k, v, now, step) for k, v in ((_mlflow_key(k), v) for k, v in metrics.items())
                  if step not in self.seen.get(k, ())]
        for i in range(0, len(points), 1000):
            self.client.log_batch(self.run_id, metrics=points[i:i + 1000])

    def set_tags(self, tags: dict) -> None:
        from mlflow.entities import RunTag
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=_MLFLOW_STATUS.get(status, "FINISHED"))


def _mlflow_key(key: str) -> str:
    return re.sub(r"[^\w\-. /:]", "_", key)


def _read_tracker_file(run_dir: Path) -> dict:
    path = Path(run_dir) / TRACKER_FILE
    try:
        st = path.lstat()
        data = json.loads(path.read_bytes()) if stat.S_ISREG(st.st_mode) and st.st_size < 65536 else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


TRACKERS = {"tensorboard": TensorBoardTracker, "mlflow": MLflowTracker}


# ---------------------------------------------------------------------------------------------------------
# --report-to

def report_to(text: str):
    """--report-to: 'tensorboard', 'mlflow' or both comma-separated ('none': no tracker) -> the names in a fixed
    order, comma-joined, or None."""
    names = [w.strip().lower() for w in str(text).split(",") if w.strip()]
    if names in ([], ["none"]):
        return None
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{text!r} names no tracker ({', '.join(unknown)}); use tensorboard, mlflow, "
                                         "or both: tensorboard,mlflow")
    return ",".join(n for n in TRACKERS if n in names)


def check_trackers(value) -> tuple:
    """The tracker names of a `report_to` setting; EngineError (one line) for a name that is no tracker or a tracker
    whose packages are not installed, naming the pip command."""
    try:
        text = report_to(value) if value else None
    except argparse.ArgumentTypeError as e:
        raise EngineError(f"--report-to {e}") from None
    names = tuple(text.split(",")) if text else ()
    for name in names:
        missing = [m for m in TRACKERS[name].needs() if importlib.util.find_spec(m) is None]
        if missing:
            raise EngineError(f"--report-to {name} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                              f"not installed; {PIP} (or pip install {TRACKERS[name].pip})")
    return names


# ---------------------------------------------------------------------------------------------------------
# the trackers of one run

class Trackers:
    """The trackers a run reports to (`open_trackers`). They start at the first record (or at `close` for a run that
    logged none): params and tags first. Every call to one is guarded: an exception warns once on stderr and drops
    that tracker; the run never sees it."""

    def __init__(self, names: tuple, run_dir, params: dict, tags: dict):
        self.names, self.run_dir = tuple(names), Path(run_dir)
        self.root, self.experiment, study_tags = study_job(self.run_dir)
        self.params = params
        self.tags = {**study_tags, **tags, "run_dir": str(self.run_dir.absolute())}
        self.live = None  # [(name, tracker)] once started

    def _start(self, first: int = None) -> None:
        """Start the trackers; `first`: the step of the first record this process logs (a resumed run's events from
        there on are purged), None at a close with no record (past the run's last step)."""
        if self.live is not None:
            return
        self.live = []
        if first is None:
            try:
                first = next_step(self.run_dir)
            except Exception:  # an unreadable metrics.jsonl: no purge of earlier events
                first = None
        for name in self.names:
            try:
                self.live.append((name, TRACKERS[name](run_dir=self.run_dir, root=self.root, experiment=self.experiment,
                                                       first_step=first)))
            except Exception as e:
                _warn(name, "start", e)
        self._each("log_params", self.params)
        self._each("set_tags", self.tags)

    def _each(self, method: str, *args) -> None:
        for name, tracker in list(self.live):
            try:
                getattr(tracker, method)(*args)
            except Exception as e:
                self.live.remove((name, tracker))
                _warn(name, method, e)
                try:
                    tracker.close("failed")  # let go of its files and threads; it may fail again, quietly
                except Exception:
                    pass

    def log_metrics(self, record: dict) -> None:
        """A metrics.jsonl record, as appended, to every tracker."""
        if not self.names or not isinstance(record.get("step"), (int, float)):
            return
        self._start(int(record["step"]))
        scalars = record_scalars(record)
        if scalars:
            self._each("log_metrics", int(record["step"]), scalars)

    def close(self, status: str) -> None:
        """The run ended with `status` (engine.status: finished, failed, cancelled): its final checkpoint as a tag,
        then each tracker closed."""
        if not self.names or self.live == []:
            return
        self._start()
        try:
            ck = final_checkpoint(self.run_dir)
        except Exception:
            ck = None
        if ck is not None:
            self._each("set_tags", {"checkpoint": str(Path(ck).absolute())})
        self._each("close", status)
        self.live = []


def _warn(name: str, what: str, e: Exception) -> None:
    line = (str(e).strip().splitlines() or [""])[0][:200]
    print(f"warning: the {name} tracker failed ({what}: {type(e).__name__}: {line}) and is off for the rest of this run; "
          f"training goes on, metrics.jsonl has every record", file=sys.stderr, flush=True)


def open_trackers(names, run_dir, config: dict, tags: dict = None) -> Trackers:
    """The trackers `names` (a `report_to` setting: 'tensorboard,mlflow', or None for none) of the run in `run_dir`
    with settings `config` and `tags` (e.g. {"kind": "pretrain"}); EngineError when one is unknown or not installed.
    Nothing is written before the first record."""
    return Trackers(check_trackers(names), run_dir, flat_settings(config), dict(tags or {}))
