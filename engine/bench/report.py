"""The benchmark's report as a table for the terminal."""
from engine.bench.scenarios import PRETRAINING, VARLEN, scenario_of


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 1:
        return f"{v:.2f}{unit}"
    return f"{v:.3g}{unit}"


def format_table(r: dict) -> str:
    c = r["config"]
    m = r["machine"]
    dev = m.get("gpu") if r["device"].startswith("cuda") else f"{m['cpu']}, {m['threads']} threads"
    lines = [f"bench {r['scenario']}: preset {c['preset']} (L={r['model']['layers']} H={r['model']['hidden']} A={r['model']['heads']} V={r['model']['vocab']}), "
             f"T={c['seq_len']} B={c['batch_size']}, {r['engine']['precision']} vs {r['transformers']['precision']}, {r['device']} ({dev}), "
             f"{c['steps']} timed steps after {c['warmup']} warm-up, load {m.get('loadavg_start')} -> {m.get('loadavg_end')}"]
    scenario = scenario_of(r["scenario"])
    if scenario is VARLEN:
        lines.append(f"rows: {c['unit']} lengths from BBC, padding {c['padding']}: mean {r['mean_length']:.1f} real tokens, padding fraction {r['padding_fraction']:.2f}")
    elif scenario is PRETRAINING:
        lines.append(f"rows: {'the first batches of ' + c['data'] if c['data'] else 'full-length synthetic rows'}: mean "
                     f"{r['mean_length']:.1f} real tokens, padding fraction {r['padding_fraction']:.3f}; the engine "
                     f"{'packs them into ' if c['packing'] else 'pads them: '}{r['engine_rows_per_batch']:.1f} rows a batch of {c['batch_size']}")
    s = r["start"]
    if "engine" in s:
        lines.append(f"start loss: engine {s['engine']:.5f}, transformers {s['transformers']:.5f} -> {'same' if s['same'] else 'DIFFERENT'}")
    else:
        lines.append(f"start: {s['metric']} = {s['value']:.2e} -> {'same' if s['same'] else 'DIFFERENT'}")
    rows = [("sequences/s", "sequences_per_s"), ("real tokens/s", "tokens_per_s"), ("step ms (median)", "step_ms_median"),
            ("step ms (p90)", "step_ms_p90"), ("peak step memory MB", "peak_mem_mb"), ("model TFLOP/s", "model_tflops"), ("MFU", "mfu"),
            ("compile s", "compile_s")]

    def block(title, e, h):
        out = [f"{title:<22}{'engine':>14}{'transformers':>14}{'engine/tf':>12}"]
        for label, k in rows:
            if k not in e and k not in h:
                continue
            ev, hv = e.get(k), h.get(k)
            ratio = ev / hv if isinstance(ev, (int, float)) and isinstance(hv, (int, float)) and hv else None
            out.append(f"{label:<22}{_fmt(ev):>14}{_fmt(hv):>14}{_fmt(ratio, 'x'):>12}")
        return out

    main_title = scenario.step.format(batch_size=c["batch_size"])
    lines += block(main_title, r["engine"], r["transformers"])
    lines.append(f"ratio (throughput engine/transformers): {r['ratio']:.2f}x")
    for key, title in (("latency", "forward, batch 1"), ("forward", "forward (features)")):
        if key in r:
            lines += block(title, r[key]["engine"], r[key]["transformers"])
            lines.append(f"{key} ratio: {r[key]['ratio']:.2f}x")
    return "\n".join(lines)
