"""engine/replaced_tokens.py: the discriminator of an ELECTRA checkpoint says, token by token, P(replaced): the same
numbers as the training model's head; a checkpoint of another objective is one line."""
import pytest
import torch

from engine.checkpoint import save
from engine.config import BertConfig
from engine.electra import ElectraPreTraining, save_pair
from engine.errors import EngineError
from engine.model import BertForPreTraining
from engine.replaced_tokens import has_detector, load_detector, replaced_tokens, swap_word


def test_the_probe_reads_the_discriminator_s_own_head(tmp_path, bbc_tokenizer):
    cfg = BertConfig(vocab_size=bbc_tokenizer.vocab_size, num_layers=2, hidden_size=64, num_heads=1,
                     intermediate_size=256, has_mlm_head=False, has_nsp_head=False)
    torch.manual_seed(0)
    model = ElectraPreTraining(cfg, 0.25).eval()
    with torch.no_grad():
        model.rtd.dense_prediction.bias.fill_(0.3)  # not the initial zero, so a head left unread would show
    ckpt = save(model, tmp_path / "ckpt", tokenizer=bbc_tokenizer)
    save_pair(model, ckpt, bbc_tokenizer)
    assert has_detector(ckpt)
    det = load_detector(ckpt)
    text = swap_word("the minister said the talks would resume on monday", 4, "bananas")
    assert text == "the minister said the bananas would resume on monday"
    rows = replaced_tokens(det, text)
    enc = bbc_tokenizer.encode(text)
    assert [r["token"] for r in rows] == enc.tokens and rows[0]["token"] == "[CLS]"
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        want = torch.sigmoid(model(ids, torch.zeros_like(ids), torch.ones_like(ids)).rtd_logits[0]).tolist()
    assert [r["p_replaced"] for r in rows] == pytest.approx(want, abs=1e-5)
    with pytest.raises(EngineError, match="outside the text's 9 words"):
        swap_word(text, 9, "x")


def test_a_checkpoint_without_the_head_is_one_line(tmp_path, bbc_tokenizer):
    cfg = BertConfig(vocab_size=bbc_tokenizer.vocab_size, num_layers=1, hidden_size=32, num_heads=1, intermediate_size=64)
    ckpt = save(BertForPreTraining(cfg), tmp_path / "bert", tokenizer=bbc_tokenizer)
    assert not has_detector(ckpt)
    with pytest.raises(EngineError, match="no replaced-token head .*only an --objective electra run's checkpoints"):
        load_detector(ckpt)
