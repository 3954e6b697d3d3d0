"""pages/5_Probe.py on an ELECTRA checkpoint: the "which tokens were replaced?" table shows the discriminator's own
P(replaced) for each token (engine.replaced_tokens); a BERT checkpoint shows no such section."""
import pytest
import torch

from engine.checkpoint import save
from engine.config import BertConfig
from engine.electra import ElectraPreTraining, save_pair
from engine.replaced_tokens import load_detector, replaced_tokens

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "5_Probe.py"


def test_an_electra_checkpoint_gets_the_replaced_token_table(tmp_path, bbc_tokenizer, page_app):
    cfg = BertConfig(vocab_size=bbc_tokenizer.vocab_size, num_layers=1, hidden_size=64, num_heads=1,
                     intermediate_size=128, has_mlm_head=False, has_nsp_head=False)
    torch.manual_seed(0)
    model = ElectraPreTraining(cfg, 0.25)
    ckpt = save(model, tmp_path / "electra", tokenizer=bbc_tokenizer)
    save_pair(model, ckpt, bbc_tokenizer)
    root = tmp_path / "runs"
    root.mkdir()
    at = page_app(PAGE, root, probe_model_path=str(ckpt))
    text = "the bank said profits rose bananas in march"
    at.text_input(key="probe_rtd_text").input(text).run()
    assert not at.exception and not at.error
    assert "Which tokens were replaced?" in [h.value for h in at.header]
    table = [d.value for d in at.dataframe if "P(replaced)" in d.value.columns][0]
    want = replaced_tokens(load_detector(ckpt), text)
    assert table["token"].tolist() == [r["token"] for r in want]
    assert table["P(replaced)"].tolist() == pytest.approx([r["p_replaced"] for r in want], abs=1e-6)
    plain = save(ElectraPreTraining(cfg, 0.25), tmp_path / "plain", tokenizer=bbc_tokenizer)  # no discriminator/ beside
    at = page_app(PAGE, root, probe_model_path=str(plain))
    assert not at.exception and "Which tokens were replaced?" not in [h.value for h in at.header]
