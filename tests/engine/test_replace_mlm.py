"""ELECTRA's two MLM ablations (engine/replace_mlm.py): the model reads the generator's samples where the input had
[MASK] and the original text elsewhere; Replace MLM's loss is at the masked positions, All-Tokens MLM's at every real
token; the generator trains beside it; a short run's loss falls, resumes exactly, its checkpoint is a BERT with its
MLM head for engine.load and fill-mask, its generator/ loads in transformers; FLOPs count the generator."""
from dataclasses import replace

import pytest
import torch

from engine import runs
from engine.config import BertConfig
from engine.electra import GENERATOR_DIR
from engine.errors import EngineError
from engine.objectives import ALL_TOKENS_MLM, MLM, REPLACE_MLM, SUMS, objective
from engine.pretraining.config import PretrainConfig, validate
from engine.replace_mlm import GeneratorMLMPreTraining, unmasked_targets
from engine.vocab_loss import IGNORE_INDEX
from tests.helpers import MASK_ID as MASK
from tests.helpers import masked_batch, stopped_and_resumed


def tiny(vocab=300, hidden=64) -> BertConfig:
    return BertConfig(vocab_size=vocab, num_layers=2, hidden_size=hidden, num_heads=1, intermediate_size=4 * hidden,
                      hidden_dropout=0.0, attention_dropout=0.0, has_mlm_head=True, has_nsp_head=False)


@pytest.mark.parametrize("all_tokens", [False, True])
def test_the_model_reads_the_generators_samples_at_the_masked_slots_and_the_text_elsewhere(all_tokens, monkeypatch):
    g = torch.Generator().manual_seed(0)
    masked, orig, rows, cols, targets, valid = masked_batch(g)
    torch.manual_seed(0)
    model = GeneratorMLMPreTraining(tiny(), 0.25, all_tokens)
    assert model.generator.embeddings is model.bert.embeddings  # one set of embeddings
    out = model(masked, torch.zeros_like(masked), torch.ones_like(masked), mlm_positions=(rows, cols), mlm_targets=targets)
    seen = out.corrupted_ids
    slot = torch.zeros_like(masked, dtype=torch.bool).index_put((rows[valid], cols[valid]), torch.tensor(True))
    assert torch.equal(seen[~slot], orig[~slot])  # the original text wherever nothing was masked
    assert not (seen == MASK).any()  # no [MASK] reaches the model: the generator's samples are there instead
    import engine.replace_mlm as R
    monkeypatch.setattr(R, "sample", lambda logits: torch.full(logits.shape[:1], 7))  # every sample token 7
    seen = model(masked, torch.zeros_like(masked), None, mlm_positions=(rows, cols), mlm_targets=targets).corrupted_ids
    assert (seen[slot] == 7).all() and torch.equal(seen[~slot], orig[~slot])
    assert out.mlm_predictions.shape == targets.shape and out.gen_predictions.shape == targets.shape
    assert (out.other_loss_sum is not None) is all_tokens
    # the generator's loss is its cross-entropy at the masked slots on the [MASK] input, independent of the model
    gen_logits = model.generator(masked, torch.zeros_like(masked), torch.ones_like(masked), rows, cols).float()
    assert out.gen_loss_sum.item() == pytest.approx(
        torch.nn.functional.cross_entropy(gen_logits, targets, ignore_index=IGNORE_INDEX, reduction="sum").item(), rel=1e-5)


def test_all_tokens_targets_are_every_real_unmasked_token():
    ids = torch.tensor([[2, 11, 12, 13, 3, 0], [2, 21, 22, 3, 0, 0]])
    am = (ids != 0).long()
    rows, cols = torch.tensor([0, 1, 1]), torch.tensor([2, 1, 0])
    valid = torch.tensor([True, True, False])  # the last slot unused
    t = unmasked_targets(ids, am, rows, cols, valid)
    assert t.tolist() == [[2, 11, IGNORE_INDEX, 13, 3, IGNORE_INDEX], [2, IGNORE_INDEX, 22, 3, IGNORE_INDEX, IGNORE_INDEX]]
    assert unmasked_targets(ids, None, rows, cols, valid)[0, 5].item() == 0  # no mask given: every position is real


def test_the_objectives_are_entries_with_their_metrics_checks_and_flops():
    assert objective("replace-mlm") is REPLACE_MLM and objective("all-tokens-mlm") is ALL_TOKENS_MLM
    for o in (REPLACE_MLM, ALL_TOKENS_MLM):
        assert o.generator and o.fills and not o.rtd and o.heads == ("mlm",) and {"gen_loss", "gen_acc"} <= set(o.metrics)
    sums = dict.fromkeys(SUMS, 0.0) | {"batches": 1, "token_n": 10, "token_correct": 4, "gen_n": 10, "gen_correct": 7, "gen_loss": 20.0}
    assert REPLACE_MLM.record(sums)["gen_acc"] == 0.7 and REPLACE_MLM.record(sums)["mlm_acc"] == 0.4
    base = PretrainConfig.classroom(objective=REPLACE_MLM.name, out="x")
    for bad, said in ((dict(init="minilm"), "drop --init"), (dict(packing=True), "does not pack"),
                      (dict(generator_size=0.0), "--generator-size"), (dict(mask_ratios=(0.5, 0.5, 0.0)), "--mask-ratios")):
        with pytest.raises(EngineError, match=said):
            validate(replace(base, **bad))
    from engine.ablations.planner import step_flops
    mlm, rep, allt = (replace(base, objective=o.name) for o in (MLM, REPLACE_MLM, ALL_TOKENS_MLM))
    assert step_flops(mlm) < step_flops(rep) < step_flops(allt)  # the generator; then the head at every token


def gm_run(tmp_path, bbc_docs, name, **over):
    from engine.pretraining.run import pretrain
    corpus = tmp_path / "bbc.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::20]), encoding="utf-8")
    settings = dict(corpus=str(corpus), objective=name, vocab_size=1000, cache_dir=str(tmp_path / "cache"),
                    layers=2, hidden=64, heads=1, max_positions=64, seq_len=64, phase2_seq_len=None, batch_size=16,
                    steps=40, lr=2e-3, warmup=4, log_every=10, eval_every=40, save_every=20, eval_max_instances=32,
                    quiet=True, num_threads=1, out=str(tmp_path / name))
    cfg = PretrainConfig.classroom(**{**settings, **over})
    return cfg, pretrain(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("obj", [REPLACE_MLM, ALL_TOKENS_MLM])
def test_a_short_run_learns_and_its_checkpoint_is_a_bert_with_its_mlm_head(tmp_path, bbc_docs, obj):
    import transformers

    import engine
    cfg, run = gm_run(tmp_path, bbc_docs, obj.name)
    train = [r for r in runs.read_metrics(run) if r["split"] == "train"]
    evals = [r for r in runs.read_metrics(run) if r["split"] == "eval"]
    assert set(obj.metrics) <= set(train[-1]) and "eval_gen_acc" in evals[-1] and "eval_mlm_acc" in evals[-1]
    assert train[-1]["loss"] < train[0]["loss"] - 1.0 and train[-1]["gen_loss"] < train[0]["gen_loss"]
    ckpt = runs.latest_checkpoint(run)
    bundle = engine.load(ckpt)
    assert "mlm" not in bundle.info["missing_heads"]
    assert len(engine.fill_mask(bundle, "the government said on [MASK] that the talks would go on")[0]) == 5
    hf, info = transformers.ElectraForMaskedLM.from_pretrained(str(ckpt / GENERATOR_DIR), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.slow
def test_a_run_resumes_exactly(tmp_path, bbc_docs):
    cfg, _ = gm_run(tmp_path, bbc_docs, ALL_TOKENS_MLM.name, steps=30, eval_every=0, save_every=20)
    a, b = stopped_and_resumed(cfg, tmp_path)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    assert a[-1]["loss"] == pytest.approx(b[-1]["loss"], rel=1e-6) and a[-1]["gen_acc"] == b[-1]["gen_acc"]
