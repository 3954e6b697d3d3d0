"""Resolve once, at the edge: the settings a run trains and what it starts from, checked before anything is written.

- `resolve(cfg, given=(), bundle=None)`: the settings a run trains. A `--data` folder's own settings read into the
  config (a typed flag that contradicts them refused), every check that needs no data (`config.validate`), then
  `--init`'s architecture and vocabulary (`init.resolve_init`). `python -m engine pretrain`, `engine.pretrain`, the
  Pre-train page's form and the class preparation all call this one function, so a mistake reads the same everywhere
  and nothing downstream resolves a setting again.
- `Plan`: what the training loop receives (engine/pretraining/loop.py `train`): the resolved settings, the run
  folder (a `run_folder.RunFolder`, which owns its checkpoints and the rewind before a resume) and where the run
  starts in it (a complete checkpoint, or step 0 again), the micro-batch, the tokenizer and the data of each phase,
  and the data's fingerprint run.json records. engine/pretraining/run.py makes it: rank 0's
  read-only checks of the run folder (engine/pretraining/run_folder.py), the run lock, then the tokenizer and data.
"""
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from engine.errors import EngineError
from engine.pretraining.config import PretrainConfig, validate
from engine.pretraining.init import resolve_init
from engine.pretraining.run_folder import RunFolder


# the settings a prepared data folder fixes (its manifest's names), and the flags that name them
PREPARED_FIELDS = ("objective", "seq_len", "short_seq_prob", "dupe_factor", "eval_fraction", "input_format")


def with_prepared_data(cfg: PretrainConfig, given: tuple = ()) -> PretrainConfig:
    """`cfg` with the settings of its --data folder (objective, seq_len, short_seq_prob, dupe_factor,
    eval_fraction, corpus): the shards were made with them. A setting in `given` (flags typed) that differs is
    refused, and so are --tokenizer and a --corpus other than the data's own (the data's vocabulary and text are used)."""
    if not cfg.data:
        return cfg
    from engine.pretraining.prepare import read_manifests

    m = read_manifests(cfg.data)[0]
    for k in PREPARED_FIELDS:
        if k in given and getattr(cfg, k) != m[k]:
            raise EngineError(f"--{k.replace('_', '-')} {getattr(cfg, k)} differs from the {m[k]} that {cfg.data} was prepared "
                              f"with; leave it out, or prepare the data again with it")
    if cfg.phase2_seq_len:
        raise EngineError("--phase2-seq-len needs data at a second length, which --data does not give; train one phase "
                          "(--phase2-seq-len 0, phase2_seq_len=None), each phase from its own prepared folder, or leave --data out")
    if "tokenizer" in given:
        raise EngineError(f"--data {cfg.data} brings its own vocabulary; leave out --tokenizer")
    if "corpus" in given and str(cfg.corpus) != str(m["corpus"]):  # (a queued job names the data's own corpus)
        raise EngineError(f"--corpus {cfg.corpus} and --data {cfg.data} both name the text to train on (the data was prepared "
                          f"from {m['corpus']}); drop --corpus to train on the prepared data, or drop --data")
    return replace(cfg, data=str(Path(cfg.data).expanduser().resolve()), corpus=str(m["corpus"]), tokenizer=None,
                   **{k: m[k] for k in PREPARED_FIELDS})



def resolve(cfg: PretrainConfig, given: tuple = (), bundle=None) -> PretrainConfig:
    """The settings the run trains (see the module docstring); `given`: the flags typed (a --data folder refuses the
    ones that contradict it); `bundle`: the init, already loaded (else loaded here). One EngineError line per mistake."""
    cfg = with_prepared_data(cfg, given)
    validate(cfg)
    return resolve_init(cfg, bundle)


@dataclass
class Plan:
    """What a run trains and where it starts, resolved before the loop (the module docstring)."""
    cfg: PretrainConfig  # resolved: `resolve`
    run: RunFolder  # the run folder: where the run starts, its checkpoints, the rewind before a resume
    checkpoint: Optional[Path]  # the complete checkpoint the run continues from; None: from step 0
    restart: bool  # a run folder with no complete checkpoint, started again from step 0 with its own settings
    micro: int  # sequences per forward pass on one rank
    tokenizer: object  # engine.tokenizer.Tokenizer, saved in the run folder
    data: list  # a PretrainingCache per phase
    fingerprint: str  # run.json's corpus_fingerprint: the data's key (text, vocabulary, instance settings)

    @property
    def run_dir(self) -> Path:
        return self.run.path
