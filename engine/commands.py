"""The engine's commands, each written once: its name, the module whose `main(argv)` runs it, and its line in
`python -m engine --help`. The shell interface (engine/__main__.py) dispatches and prints help from this table, and
the job queue (engine.jobs) accepts a job only when it starts with one of these names. Standard library only, and
nothing imported: the queue reads it without loading the entry point."""

COMMANDS = {  # name -> (module with main(argv), what it does)
    "tokenizer": ("engine.tokenizer", "train a WordPiece vocabulary on a corpus"),
    "prepare": ("engine.pretraining.prepare", "prepare pre-training data from a corpus of any size into shards "
                                              "(worker processes)"),
    "pretrain": ("engine.pretraining.run", "pre-train BERT (MLM+NSP, MLM only, LTR, or MLM+SOP) into a run folder"),
    "finetune": ("engine.finetune", "fine-tune on a downstream task over a learning-rate grid with restarts"),
    "features": ("engine.features", "extract frozen features (any layer or the paper's combinations) and train a "
                                    "classifier on them"),
    "probe": ("engine.probes", "masked-token fill, next-sentence probability and attention maps"),
    "layers": ("engine.layers", "probes per layer with control tasks and the expected layer, over a run's checkpoints; "
                                "--heads: head roles"),
    "ablate": ("engine.ablations", "run or summarise an ablation study (paper Tables 5-8, Figure 5)"),
    "bench": ("engine.bench", "benchmark the engine against transformers"),
    "class": ("engine.classroom", "prepare this machine for the first class in one step (prepare, status, cancel)"),
    "measured": ("engine.measured", "the measured facts the product states (engine/measured.py); --readme prints "
                                    "README.md's table"),
}


def help_text() -> str:
    """The command list `python -m engine --help` prints."""
    lines = [f"  {name:<11} {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(["commands:", *lines, "run `python -m engine <command> --help` for its flags"])
