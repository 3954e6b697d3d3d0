"""Pre-training (paper 3.1, A.2), one module per concept; the entry point is `engine.pretraining.run.pretrain`
(`engine.pretrain`, `python -m engine pretrain`). The modules, in the order a run meets them:

- config.py: every setting (`PretrainConfig`; its defaults are the paper's; the named recipes laid over them are
  engine/recipes.py), the checks and the model a run trains.
- run.py: the entry point and its command line: checks, the run lock, tokenizer and data, then the loop.
- init.py: `--init`, continued pre-training from a run, a checkpoint, a Hugging Face folder or MiniLM.
- instances.py: segment pairs with IsNext/NotNext, single stretches, short sequences, the held-out documents.
- input_formats.py: RoBERTa's input formats (SEGMENT-PAIR, SENTENCE-PAIR, FULL-SENTENCES, DOC-SENTENCES), one table.
- cache.py: the memory-mapped store of unmasked instances, its key and checks; batches from it.
- prepare.py: `python -m engine prepare`, a corpus of any size streamed into shards by worker processes.
- masking.py: the 80/10/10 masked-LM corruption, whole-word masking, the fixed held-out masking.
- step_inputs.py: what a step reads: a fixed number of prediction slots per sequence, the instances packed.
- loop.py: model, optimizer, steps, metrics, held-out evaluation.
- run_folder.py: the run folder's checks, checkpoints, RNG state and signals.

Nothing is imported here, so `import engine.pretraining.config` (pages, study plans) needs no torch.
"""
