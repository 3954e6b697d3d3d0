#!/usr/bin/env bash
# Every GPU row of BENCHMARKS.md in one run: each command's JSON line goes to $OUT/gpu-bench.jsonl (OUT defaults to
# the current folder), the step's profile to $OUT/gpu-profile.txt. Nothing else should use the GPU meanwhile. About
# 10 minutes on one H100 or H200. The rows run in the order of the targets (BERT-base and BERT-large at 128
# tokens, padded and packed corpus lengths, compiled), then the rest; DEADLINE=S skips the rows that would start after
# S seconds (each is written as {"skipped": ...}), so a short lease still brings back the rows that matter most.
# DEVICE=cpu checks the flags on a machine without a GPU (slow: base rows take minutes there).
# --data all builds the corpus's pre-training data into the data cache ($BERT_STUDIO_CACHE) first; on a machine
# without the corpus packages, build them where they are (`python -m engine bench --scenario pretrain --data all
# --seq-len 128` and 512 build them) and point DATA_128 and DATA_512 at the cache folders.
set -uo pipefail
OUT="${OUT:-.}"
DEADLINE="${DEADLINE:-0}"
D128="${DATA_128:-all}"
D512="${DATA_512:-all}"
mkdir -p "$OUT"
start=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> "$OUT/gpu.txt"
# a few steps of a tiny model through every path the rows take (corpus data, packing) first: a broken engine fails
# here in seconds, with its error, instead of in every row
if ! timeout 180 python -m engine bench --scenario pretrain --preset tiny --seq-len 128 --batch-size 8 --steps 2 \
    --warmup 1 --data "$D128" --packing --precision bf16 --device "${DEVICE:-cuda}" --json --no-memory > /dev/null; then
  echo "the smoke check above failed: no rows run" >&2
  exit 1
fi
late() { [ "$DEADLINE" -gt 0 ] && [ $((SECONDS - start)) -ge "$DEADLINE" ]; }
run() {
  if late; then echo "{\"skipped\": \"$*\"}" >> "$OUT/gpu-bench.jsonl"; return; fi
  echo "== $* ($((SECONDS - start)) s)" >&2
  timeout 300 python -m engine bench "$@" --precision bf16 --device "${DEVICE:-cuda}" --json >> "$OUT/gpu-bench.jsonl" \
    || echo "{\"failed\": \"$*\"}" >> "$OUT/gpu-bench.jsonl"
}
base128="--scenario pretrain --preset base --seq-len 128 --batch-size 256 --steps 30 --warmup 5"
large128="--scenario pretrain --preset large --seq-len 128 --batch-size 128 --steps 30 --warmup 5"
base512="--scenario pretrain --preset base --seq-len 512 --batch-size 32 --steps 30 --warmup 5"
run $base128
run $base128 --data "$D128" --packing
run $base128 --data "$D128"
run $large128
run $large128 --data "$D128" --packing
run $large128 --data "$D128"
run $base128 --compile
if ! late; then
  echo "== profile ($((SECONDS - start)) s)" >&2
  timeout 240 python docs/lab-notes/gpu_step_profile.py --preset base --seq-len 128 --batch-size 256 \
    --device "${DEVICE:-cuda}" > "$OUT/gpu-profile.txt" 2>&1 || echo "profile failed" >> "$OUT/gpu-profile.txt"
fi
run $base512 --data "$D512" --packing
run $base512 --data "$D512"
run --scenario pretrain --preset base --seq-len 128 --batch-size 64 --steps 30 --warmup 5
run --scenario pretrain --preset large --seq-len 128 --batch-size 32 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 512 --batch-size 16 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 512 --batch-size 64 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 128 --batch-size 64 --steps 30 --warmup 5 --compile
run --scenario infer --preset base --seq-len 128 --batch-size 64
run --scenario finetune --preset base --seq-len 128 --batch-size 32
run --scenario pretrain --preset mini --seq-len 128 --batch-size 128 --steps 30 --warmup 5
echo "== done ($((SECONDS - start)) s)" >&2
