"""`python -m engine bench`: the engine against `transformers`, side by side, in one process.

Both sides get the same config, the same initial weights (the engine's, copied across with
`checkpoint.to_hf_state_dict`), the same batches and the same optimizer settings (AdamW 0.9/0.999, eps 1e-6,
weight decay 0.01 off LayerNorm weights and biases, gradient clipping at 1.0, fused where the device has it,
which is also the Hugging Face Trainer's default optimizer). Steps alternate engine / transformers (the order
flips every step, so a load spike on the shared machine hits both), the first `warmup` steps are not timed,
and the figures are medians (and 90th percentiles) over `steps` timed steps. Before timing, both sides compute
the loss of the first batch in eval mode: they must agree (`same_start_loss`).

Scenarios:
- `pretrain`: one MLM+NSP training step, exactly round(15% of the non-special positions) masked per row (80/10/10),
  on full-length synthetic rows or, with --data, on the first batches of a prepared corpus (its real lengths).
  transformers' BertForPreTraining projects every position onto the vocabulary and takes the loss over (B*T, V)
  logits on the padded batch (its real behaviour); the engine runs its pre-training step
  (engine.pretraining.loss.forward_loss): the MLM head at a fixed number of slots per sequence, its loss in blocks
  without keeping the logits (engine.vocab_loss), on the padded rows, or with `--packing` the batch's instances
  packed into as few rows as they fit (as `pretrain --packing`).
- `infer`: the encoder forward as features and probes use it (eval, inference mode, all hidden states):
  batch throughput at --batch-size and, separately, batch-1 latency (`latency`).
- `finetune`: one sequence-classification training step (dropout + linear on C, as BertForSequenceClassification).
- `pipeline`: the input pipeline alone, no model and no transformers side: micro-batches of --batch-size read
  from the shards of --data (a `python -m engine prepare` folder), collated, masked and prefetched exactly as
  `pretrain --data` makes them (`engine.pretraining.loop.pipeline_throughput`), in real tokens/s.
- `varlen`: the fine-tuning step (and, under `forward`, the inference forward) on batches whose real lengths are
  drawn from the BBC corpus tokenised with the BERT uncased vocabulary (sentences, sentence pairs or whole
  documents, --unit), padded to the longest row of each batch as a dynamic-padding collator does
  (--padding longest) or to --seq-len (--padding max_length). transformers computes every padded position;
  the engine runs with `unpad=True`.

Reported per side: sequences/s, real (non-padding) tokens/s, step time median and p90 (ms), peak memory of a step,
model TFLOP/s and the model FLOP utilisation (MFU) against the dense matrix-multiply peak the benchmark measures
on the device itself (bf16 on CUDA; on a CPU bf16 for a bf16 engine where the CPU has bf16 units, else fp32); for the training scenarios the padding
fraction of the padded batches, and for `pretrain` the rows the engine computed per batch. Model FLOPs are counted the same for both sides (matrix multiplies, attention, the MLM head at the
masked positions only), so a side that computes more than the model needs gets a lower MFU. Peak memory: on CUDA
`max_memory_allocated` during one step above what was allocated before it; on CPU the peak resident set size
during one step above the resting size (sampled every 0.5 ms from /proc/self/statm after `malloc_trim`;
tracemalloc does not see torch's allocations). Ratios are engine / transformers (`ratio`: throughput).
"""
from engine.bench.cli import main  # noqa: F401 (python -m engine bench: engine.commands)
