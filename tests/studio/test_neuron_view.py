"""The neuron view: engine.analysis.queries_and_keys against transformers' BertModel on the same weights (q = W_q h
+ b_q of each layer's input h, split into heads), softmax(q k / sqrt(D)) equal to the attention maps, and the
offline view's HTML (studio.neuron_view): the chosen head's numbers, no URL, tokens as data only."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import engine
from engine import analysis, probes
from studio.neuron_view import neuron_view_html

CHROMIUM = "/usr/bin/chromium"


def _hf_bert(tmp_path, tokenizer, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64, attn_implementation="eager")
    hf = transformers.BertForPreTraining(cfg).eval()
    with torch.no_grad():  # random init leaves biases at 0; perturb them so the test sees b_q and b_k
        for n, p in hf.named_parameters():
            if "LayerNorm" in n or n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    d = tmp_path / "hf"
    hf.save_pretrained(d)
    tokenizer.save(d)
    return hf, d


@pytest.mark.slow
def test_queries_and_keys_match_transformers_bert(tmp_path, bbc_tokenizer):
    hf, d = _hf_bert(tmp_path, bbc_tokenizer)
    bundle = engine.load(d)
    tokens, q, k, att = analysis.queries_and_keys(bundle, "the cat sat on the mat .", "it was happy .")
    T, L, A, D = len(tokens), 2, 4, 16
    assert q.shape == k.shape == (L, A, T, D) and att.shape == (L, A, T, T)
    # transformers' own query / key projections, captured by hooks during its forward pass
    seen = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, key=(l, name): seen.__setitem__(key, out[0].detach()))
             for l, layer in enumerate(hf.bert.encoder.layer) for name, m in (("q", layer.attention.self.query), ("k", layer.attention.self.key))]
    ids = torch.tensor([bundle.tokenizer.encode("the cat sat on the mat .", "it was happy .").ids])
    tt = torch.tensor([bundle.tokenizer.encode("the cat sat on the mat .", "it was happy .").type_ids])
    with torch.no_grad():
        ref = hf.bert(input_ids=ids, token_type_ids=tt, output_attentions=True)
    for h in hooks:
        h.remove()
    for l in range(L):
        hf_q = seen[(l, "q")].view(T, A, D).transpose(0, 1).numpy()  # (A, T, D)
        hf_k = seen[(l, "k")].view(T, A, D).transpose(0, 1).numpy()
        np.testing.assert_allclose(q[l], hf_q, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(k[l], hf_k, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(att[l], ref.attentions[l][0].numpy(), atol=1e-5)
    # the attention is softmax(q . k / sqrt(D)) of these vectors
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(p / p.sum(-1, keepdims=True), att, atol=1e-5)


URL = re.compile(r"https?://(?!(?:127\.0\.0\.1|localhost|\[::1\])[:/])", re.I)  # a URL outside localhost


def _payload(html):
    return json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))


def _vectors(L=2, A=3, T=5, D=4, seed=0):
    g = np.random.default_rng(seed)
    return g.normal(size=(L, A, T, D)).astype(np.float32), g.normal(size=(L, A, T, D)).astype(np.float32)


def test_neuron_view_html_holds_only_the_chosen_head_and_no_url():
    q, k = _vectors()
    tokens = ["[CLS]", "</script><script>alert(1)</script>", "b", "c", "[SEP]"]
    html, height = neuron_view_html(tokens, q, k, layer=1, head=2)
    data = _payload(html)
    assert data["layer"] == 2 and data["head"] == 3 and data["D"] == 4 and data["query"] == 1
    np.testing.assert_allclose(data["q"], q[1, 2], atol=6e-4)
    np.testing.assert_allclose(data["k"], k[1, 2], atol=6e-4)
    assert data["tokens"] == tokens and "</script><script>alert(1)" not in html
    assert not URL.search(html) and "src=" not in html and height > 5 * 20


def test_neuron_view_refuses_a_head_outside_the_model():
    q, k = _vectors()
    with pytest.raises(ValueError, match="outside this model"):
        neuron_view_html(list("abcde"), q, k, layer=2, head=0)
    with pytest.raises(ValueError, match="4 tokens"):
        neuron_view_html(list("abcd"), q, k, layer=0, head=0)


@pytest.mark.slow
def test_neuron_view_computes_the_heads_softmax_in_chromium(tmp_path):
    """The page's own q . k / sqrt(D) softmax is the attention row, before and after clicking another query."""
    from playwright.sync_api import sync_playwright  # pinned; the system Chromium is not
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}")
    q, k = _vectors(T=6, D=8)
    tokens = ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    s = q[0, 1] @ k[0, 1].T / np.sqrt(8)
    att = np.exp(s - s.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    page_file = tmp_path / "nv.html"
    page_file.write_text(neuron_view_html(tokens, q, k, 0, 1)[0], encoding="utf-8")
    asked = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else (asked.append(r.request.url), r.abort()))
            page.goto(page_file.as_uri())
            root = page.locator("#bs-neuron-view[data-drawn='1']")
            root.wait_for(timeout=10_000)
            np.testing.assert_allclose(json.loads(root.get_attribute("data-weights")), att[1], atol=2e-3)
            page.locator(".nv-q").nth(3).click()
            np.testing.assert_allclose(json.loads(root.get_attribute("data-weights")), att[3], atol=2e-3)
            assert page.locator(".nv-keys div").count() == 6
        finally:
            browser.close()
    assert asked == []


@pytest.mark.slow
def test_attention_page_neuron_view_in_a_browser_with_the_network_blocked(studio_browser, tiny_run):
    """The studio's Attention page (MiniLM, the default model) in Chromium, every request outside localhost
    aborted: the neuron view draws layer 1 head 1's weights, and no view names a URL outside localhost."""
    start, browser = studio_browser
    studio = start(tiny_run.parent)
    bundle = engine.load("minilm")
    _, att = probes.attention(bundle, "the cat sat on the mat .", "it was very happy .")
    page = studio.open_page(browser)
    page.goto(studio.url + "/Attention")
    page.get_by_role("tab", name="Neuron view").click()
    frame = page.frame_locator("iframe").nth(1)
    root = frame.locator("#bs-neuron-view[data-drawn='1']")
    root.wait_for()
    np.testing.assert_allclose(json.loads(root.get_attribute("data-weights")), att[0, 0, 1], atol=2e-3)
    frame.locator(".nv-q").nth(2).click()
    np.testing.assert_allclose(json.loads(root.get_attribute("data-weights")), att[0, 0, 2], atol=2e-3)
    for f in page.frames[1:]:
        assert not URL.search(f.content()), f"a view names a URL outside localhost: {URL.search(f.content())}"
    assert studio.blocked == [], f"the Attention page tried to reach the network: {studio.blocked[:5]}"


def test_bertviz_offline_inlines_the_vendored_scripts_with_their_licences():
    from studio import bertviz_offline
    for script in bertviz_offline.SCRIPTS:
        assert (bertviz_offline.VENDOR / script).stat().st_size > 10_000
        assert (bertviz_offline.VENDOR / script).parent.joinpath("LICENSE").read_text().strip()
    html = bertviz_offline.offline('<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>'
                                   "<div id='vis'></div><script>require.config({\n paths: {d3: 'https://cdnjs.cloudflare.com/x'}\n});"
                                   "requirejs(['jquery', 'd3'], function ($, d3) {});</script>")
    assert "cdnjs" not in html and "paths: {d3:" not in html and "requirejs(['jquery', 'd3']" in html
    # the exact versions bertviz asks for (jQuery: 2.1.0, the first 2.x on npm), globals first, then require.js
    order = [html.index(s) for s in ("d3js.org v5.7.0", "jQuery v2.1.0", "RequireJS 2.3.6", 'define("d3"', "requirejs(['jquery'")]
    assert order == sorted(order)


@pytest.mark.slow
def test_bertviz_head_and_neuron_views_draw_offline_in_chromium(tmp_path):
    from playwright.sync_api import sync_playwright  # pinned, as bertviz is; the system Chromium is not
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}")
    from studio import bertviz_offline
    q, k = _vectors(L=2, A=2, T=4, D=4)
    att = np.full((2, 2, 4, 4), 0.25, dtype=np.float32)
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    pages = {"head": bertviz_offline.head_view(tokens, att), "neuron": bertviz_offline.neuron_view(tokens, q, k, att)}
    asked, errors = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            for name, html in pages.items():
                f = tmp_path / f"{name}.html"
                f.write_text(html, encoding="utf-8")
                page = browser.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else (asked.append(r.request.url), r.abort()))
                page.goto(f.as_uri())
                page.locator("#vis svg").first.wait_for(timeout=10_000)
                assert page.locator("#vis text", has_text="[CLS]").count() >= 1
        finally:
            browser.close()
    assert asked == [] and errors == []
