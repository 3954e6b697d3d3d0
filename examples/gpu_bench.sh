#!/usr/bin/env bash
# Every GPU row of BENCHMARKS.md in one run: each command's JSON line goes to $OUT/gpu-bench.jsonl (OUT defaults to
# the current folder). Nothing else should use the GPU meanwhile. About 8-12 minutes on one H100 or H200.
# DEVICE=cpu checks the flags on a machine without a GPU (slow: base rows take minutes there).
set -uo pipefail
OUT="${OUT:-.}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> "$OUT/gpu.txt"
run() {
  echo "== $*" >&2
  timeout 300 python -m engine bench "$@" --precision bf16 --device "${DEVICE:-cuda}" --json >> "$OUT/gpu-bench.jsonl" \
    || echo "{\"failed\": \"$*\"}" >> "$OUT/gpu-bench.jsonl"
}
run --scenario pretrain --preset base --seq-len 128 --batch-size 64 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 128 --batch-size 256 --steps 30 --warmup 5
run --scenario pretrain --preset large --seq-len 128 --batch-size 128 --steps 30 --warmup 5
run --scenario pretrain --preset large --seq-len 128 --batch-size 32 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 512 --batch-size 16 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 512 --batch-size 64 --steps 30 --warmup 5
run --scenario pretrain --preset base --seq-len 128 --batch-size 64 --steps 30 --warmup 5 --compile
run --scenario pretrain --preset base --seq-len 128 --batch-size 256 --steps 30 --warmup 5 --compile
run --scenario infer --preset base --seq-len 128 --batch-size 64
run --scenario finetune --preset base --seq-len 128 --batch-size 32
run --scenario pretrain --preset mini --seq-len 128 --batch-size 128 --steps 30 --warmup 5
# the real lengths of a corpus (BBC + Wikipedia + State of the Union, BERT uncased vocabulary): padded (the default)
# against packed; the data are built once into the data cache (a minute or two)
run --scenario pretrain --preset base --seq-len 128 --batch-size 256 --steps 30 --warmup 5 --data all
run --scenario pretrain --preset base --seq-len 128 --batch-size 256 --steps 30 --warmup 5 --data all --packing
run --scenario pretrain --preset large --seq-len 128 --batch-size 128 --steps 30 --warmup 5 --data all
run --scenario pretrain --preset large --seq-len 128 --batch-size 128 --steps 30 --warmup 5 --data all --packing
run --scenario pretrain --preset base --seq-len 512 --batch-size 32 --steps 30 --warmup 5 --data all
run --scenario pretrain --preset base --seq-len 512 --batch-size 32 --steps 30 --warmup 5 --data all --packing
