"""The shared benchmark files beside the repository (../shared/data), when that folder is present: GLUE's RTE and
CoLA (train and dev), and SQuAD v1.1's dev set, which is split by article into a small train and dev set.
The Fine-tune page offers them and the ablation studies add RTE and CoLA to their evaluations."""
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from engine.fileio import atomic_write_json

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data beside the repo
SQUAD_DEV = "squad_v1.1/dev-v1.1.json"
SQUAD_TRAIN_ARTICLES = 38  # of the dev set's 48 articles; the last 10 are the dev set


@dataclass(frozen=True)
class SharedTask:
    name: str  # "RTE"
    description: str  # what it is and how it is scored
    kind: str  # a task format (engine.tasks.registry.FORMATS)
    metric: str  # the selection metric
    train: str  # path under ../shared/data
    dev: Optional[str]  # None: `train` is split by article (SQuAD)

    def available(self, data_dir: Path = SHARED_DATA) -> bool:
        return all((Path(data_dir) / f).is_file() for f in (self.train, self.dev) if f)


SHARED_TASKS = (
    SharedTask("RTE", "sentence pairs, accuracy", "glue", "accuracy", "rte/train.tsv", "rte/dev.tsv"),
    SharedTask("CoLA", "single sentences, Matthews correlation", "glue", "mcc", "cola/train.tsv", "cola/dev.tsv"),
    SharedTask("SQuAD v1.1", f"first {SQUAD_TRAIN_ARTICLES} articles train, the last 10 dev", "squad", "f1", SQUAD_DEV, None),
)


def shared_tasks(data_dir: Path = SHARED_DATA) -> list:
    """The shared tasks whose files are present."""
    return [t for t in SHARED_TASKS if t.available(data_dir)]


def shared_task_files(task: SharedTask, out_dir: Path, data_dir: Path = SHARED_DATA) -> tuple:
    """(train, dev) paths of a shared task. SQuAD's dev set is split by article once, into `out_dir`."""
    data_dir = Path(data_dir)
    if task.dev is not None:
        return data_dir / task.train, data_dir / task.dev
    from engine.tasks.squad import split_squad_articles
    n = SQUAD_TRAIN_ARTICLES
    train, dev = Path(out_dir) / f"squad-v1.1-first{n}.json", Path(out_dir) / f"squad-v1.1-after{n}.json"
    if not (train.is_file() and dev.is_file()):
        a, b = split_squad_articles(data_dir / task.train, n)
        atomic_write_json(train, a)
        atomic_write_json(dev, b)
    return train, dev
