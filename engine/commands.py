"""The engine's commands, as `python -m engine --help` lists them: the shell interface (engine/__main__.py) prints
this and the job queue (engine.jobs) accepts a job only when it starts with one of them. Standard library only, and
nothing imported: the queue reads it without loading the entry point."""

COMMANDS = """commands:
  tokenizer   train a WordPiece vocabulary on a corpus
  prepare     prepare pre-training data from a corpus of any size into shards (worker processes)
  pretrain    pre-train BERT (MLM+NSP, MLM only, or LTR) into a run folder
  finetune    fine-tune on a downstream task over a learning-rate grid with restarts
  features    extract frozen features (any layer or the paper's combinations) and train a classifier on them
  probe       masked-token fill, next-sentence probability and attention maps
  ablate      run or summarise an ablation study (paper Tables 5-8, Figure 5)
  bench       benchmark the engine against transformers
  class       prepare this machine for the first class in one step (prepare, status, cancel)
  measured    the measured facts the product states (engine/measured.py); --readme prints README.md's table
run `python -m engine <command> --help` for its flags"""
