"""`python -m engine bench`: its flags (from BenchConfig's defaults) and main."""
import argparse
import json
import sys
from dataclasses import fields

from engine.config import PRESETS
from engine.errors import EngineError
from engine.bench.report import format_table
from engine.bench.scenarios import PIPELINE, SCENARIOS, UNITS, BenchConfig, run_bench, run_pipeline, scenario_of


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line through the engine's error path instead of usage + exit 2
        raise EngineError(f"{message}; see python -m engine bench --help")


def build_parser() -> argparse.ArgumentParser:
    d = BenchConfig()
    ap = _Parser(prog="python -m engine bench", description="Benchmark the engine against transformers.BertForPreTraining "
                 "(sdpa attention, same weights, batches and optimizer), interleaved, after warm-up; prints a table and one JSON object.")
    ap.add_argument("--scenario", choices=SCENARIOS, default=d.scenario, help="pretrain step, infer forward, finetune step, varlen batches")
    ap.add_argument("--preset", choices=list(PRESETS), default=d.preset)
    ap.add_argument("--seq-len", type=int, default=d.seq_len, help="T (varlen: the cap on the corpus lengths)")
    ap.add_argument("--batch-size", type=int, default=d.batch_size)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default=d.precision, help="both sides: fp32, or bf16 autocast")
    ap.add_argument("--engine-precision", choices=("same", "auto", "fp32", "bf16"), default=d.engine_precision,
                    help="the engine side's precision: same as --precision, or auto (the engine's default on this device)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default=d.device)
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--steps", type=int, default=d.steps, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="untimed steps per side first")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the engine side (compile time reported)")
    ap.add_argument("--vocab-size", type=int, default=d.vocab_size)
    ap.add_argument("--num-labels", type=int, default=d.num_labels, help="classes of the finetune/varlen classifier")
    ap.add_argument("--unit", choices=UNITS, default=d.unit, help="varlen: sentences, sentence pairs or documents")
    ap.add_argument("--padding", choices=("longest", "max_length"), default=d.padding, help="varlen: pad to the batch's longest row or to --seq-len")
    ap.add_argument("--no-unpad", dest="unpad", action="store_false", help="varlen: run the engine padded too")
    ap.add_argument("--mask-rate", type=float, default=d.mask_rate)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory step")
    ap.add_argument("--data", default=d.data, help="pipeline: a prepared data folder (python -m engine prepare); pretrain: "
                    "also a pre-training cache folder or a built-in corpus name (bbc, all, ...: its data at --seq-len "
                    "with the BERT uncased vocabulary), whose real lengths the batches take")
    ap.add_argument("--packing", dest="packing", action="store_true", default=d.packing,
                    help="pretrain: the engine side packs each batch's instances into as few rows as they fit")
    ap.add_argument("--no-packing", dest="packing", action="store_false", help="pretrain: the engine side pads as transformers does")
    ap.add_argument("--prefetch", type=int, default=d.prefetch, help="pipeline: batches made ahead in a background thread")
    return ap


def main(argv) -> int:
    a = build_parser().parse_args(argv)
    names = {f.name for f in fields(BenchConfig)}
    bc = BenchConfig(**{k: v for k, v in vars(a).items() if k in names})
    if scenario_of(bc.scenario) is PIPELINE:
        report = run_pipeline(bc)
        if not a.json:
            print(f"bench pipeline: {report['tokens_per_s']:,.0f} tokens/s, {report['sequences_per_s']:,.0f} sequences/s "
                  f"(batch {bc.batch_size}, {report['batches']} batches, prefetch {bc.prefetch}, {report['data']['shards']} shards)")
        print(json.dumps(report))
        return 0
    report = run_bench(bc)
    if not a.json:
        print(format_table(report))
    print(json.dumps(report))
    sys.stdout.flush()
    return 0 if report["same_start_loss"] else 1
