"""Masked-LM corruption (`engine.pretraining.cache.mask_tokens`): statistics, invariants, whole words, seeds.

The paper's Table 8 lists MASK/SAME/RND; `mask_tokens` takes ratios in the order MASK/RANDOM/SAME.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError
from engine.pretraining.masking import IGNORE_INDEX, mask_tokens

V, MASK, PAD, CLS, SEP = 1000, 4, 0, 2, 3
SPECIAL_IDS = [0, 1, 2, 3, 4]
T_MAX = 10 ** 6  # longer than any row


def make_batch(B=64, T=96, seed=0, min_len=8):
    """Random sequences `[CLS] ids [SEP] [PAD]...` of random lengths; ids drawn from the non-special range."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(min_len, T + 1, (B,), generator=g)
    ids = torch.randint(5, V, (B, T), generator=g)
    pos = torch.arange(T)[None, :]
    real = pos < lens[:, None]
    ids[~real] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(B), lens - 1] = SEP
    special = ~real | (pos == 0) | (pos == lens[:, None] - 1)
    return ids, special, real.long()


def check_invariants(ids, special, attn, masked, labels, rate, word_starts=None):
    selected = labels != IGNORE_INDEX
    assert not (selected & special).any(), "a special token or padding was selected"
    assert not (selected & (attn == 0)).any()
    assert torch.equal(labels[selected], ids[selected]), "labels must be the original ids"
    assert torch.equal(masked[~selected], ids[~selected]), "inputs changed outside the selected positions"
    n = ((~special) & (attn == 1)).sum(1)
    k = selected.sum(1)
    want = torch.clamp(torch.floor(n.double() * rate + 0.5).long(), min=1)
    want = torch.where(n > 0, torch.minimum(want, n), torch.zeros_like(n))
    if word_starts is None:
        assert torch.equal(k, want), "exactly round(rate * n) positions per sequence"
    else:
        assert ((k >= 1) == (n >= 1)).all()


@pytest.mark.slow
def test_rate_and_80_10_10_split_over_many_draws():
    ids, special, attn = make_batch(B=128, T=128)
    g = torch.Generator().manual_seed(1)
    n_sel = n_mask = n_rand = n_same = 0
    n_real = int(((~special) & (attn == 1)).sum())
    for _ in range(12):
        masked, labels = mask_tokens(ids, special, V, MASK, rate=0.15, ratios=(0.8, 0.1, 0.1), generator=g, special_ids=SPECIAL_IDS)
        check_invariants(ids, special, attn, masked, labels, 0.15)
        sel = labels != IGNORE_INDEX
        n_sel += int(sel.sum())
        n_mask += int((sel & (masked == MASK)).sum())
        n_same += int((sel & (masked == ids)).sum())
        n_rand += int((sel & (masked != MASK) & (masked != ids)).sum())
    assert abs(n_sel / (12 * n_real) - 0.15) < 0.005
    assert abs(n_mask / n_sel - 0.8) < 0.015
    assert abs(n_rand / n_sel - 0.1) < 0.012
    assert abs(n_same / n_sel - 0.1) < 0.012


# (MASK, RANDOM, SAME) shares, the order mask_tokens' `ratios` reads: the paper's six Table 8 rows, then two more
# (SAME 80 / RANDOM 20 and SAME 100)
TABLE8 = [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.2, 0.0), (0.8, 0.0, 0.2), (0.0, 0.8, 0.2), (0.0, 1.0, 0.0),
          (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)]


@pytest.mark.parametrize("ratios", TABLE8)
def test_table8_variants(ratios):
    ids, special, attn = make_batch(B=128, T=128, seed=2)
    g = torch.Generator().manual_seed(3)
    counts = torch.zeros(3)
    for _ in range(6):
        masked, labels = mask_tokens(ids, special, V, MASK, rate=0.15, ratios=ratios, generator=g, special_ids=SPECIAL_IDS)
        check_invariants(ids, special, attn, masked, labels, 0.15)
        sel = labels != IGNORE_INDEX
        is_mask = sel & (masked == MASK)
        is_same = sel & (masked == ids)
        is_rand = sel & ~is_mask & ~is_same
        counts += torch.tensor([is_mask.sum(), is_rand.sum(), is_same.sum()], dtype=torch.float)
        # RANDOM replacements are never special tokens and never [MASK]
        assert not torch.isin(masked[is_rand], torch.tensor(SPECIAL_IDS)).any()
    frac = counts / counts.sum()
    for got, want in zip(frac.tolist(), ratios):
        if want in (0.0, 1.0):
            # a RANDOM draw equal to the original token looks like SAME (p = 1/995)
            assert abs(got - want) < 0.005, (frac, ratios)
        else:
            assert abs(got - want) < 0.02, (frac, ratios)


def test_never_selects_specials_or_padding_even_at_rate_1():
    ids, special, attn = make_batch(B=16, T=40, seed=4, min_len=3)
    masked, labels = mask_tokens(ids, special, V, MASK, rate=1.0, ratios=(1, 0, 0), generator=torch.Generator().manual_seed(0))
    sel = labels != IGNORE_INDEX
    assert torch.equal(sel, ~special)  # every real token, nothing else
    assert (masked[sel] == MASK).all() and torch.equal(masked[~sel], ids[~sel])


def test_padding_excluded_via_attention_mask_when_special_mask_misses_it():
    ids, special, attn = make_batch(B=8, T=30, seed=5)
    only_cls_sep = special & (attn == 1)  # a special mask that does not flag padding
    masked, labels = mask_tokens(ids, only_cls_sep, V, MASK, rate=0.5, generator=torch.Generator().manual_seed(0), attention_mask=attn)
    check_invariants(ids, special, attn, masked, labels, 0.5)


def test_at_least_one_position_and_empty_rows():
    ids = torch.tensor([[CLS, 10, SEP, PAD], [CLS, SEP, PAD, PAD]])
    special = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    masked, labels = mask_tokens(ids, special, V, MASK, rate=0.01, generator=torch.Generator().manual_seed(0))
    assert (labels[0] != IGNORE_INDEX).tolist() == [False, True, False, False]
    assert (labels[1] == IGNORE_INDEX).all()


def test_reproducible_with_same_seed_and_different_with_another():
    ids, special, _ = make_batch(seed=6)
    a = mask_tokens(ids, special, V, MASK, generator=torch.Generator().manual_seed(42))
    b = mask_tokens(ids, special, V, MASK, generator=torch.Generator().manual_seed(42))
    c = mask_tokens(ids, special, V, MASK, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def _words(B, T, seed):
    """Sequences whose words are 1-4 pieces long: word_starts True at each word's first piece."""
    g = torch.Generator().manual_seed(seed)
    ids, special, attn = make_batch(B, T, seed, min_len=12)
    ws = torch.zeros(B, T, dtype=torch.bool)
    for r in range(B):
        t = 0
        while t < T:
            ws[r, t] = True
            t += int(torch.randint(1, 5, (1,), generator=g))
    return ids, special, attn, ws


def test_whole_word_masking_selects_whole_words():
    ids, special, attn, ws = _words(48, 80, 7)
    g = torch.Generator().manual_seed(8)
    total_sel = total_real = 0
    for _ in range(5):
        masked, labels = mask_tokens(ids, special, V, MASK, rate=0.15, generator=g, word_starts=ws, special_ids=SPECIAL_IDS)
        check_invariants(ids, special, attn, masked, labels, 0.15, word_starts=ws)
        sel = labels != IGNORE_INDEX
        selectable = ~special
        for r in range(ids.shape[0]):
            n = int(selectable[r].sum())
            k = max(1, math.floor(n * 0.15 + 0.5))
            # walk words: all real pieces of a word share one decision, unless no word of the row fits the count
            t, T, split, shortest = 0, ids.shape[1], 0, T_MAX
            while t < T:
                e = t + 1
                while e < T and not ws[r, e] and selectable[r, e] and selectable[r, e - 1]:
                    e += 1
                piece_sel = sel[r, t:e][selectable[r, t:e]]
                split += not (piece_sel.all() or not piece_sel.any())
                shortest = min(shortest, len(piece_sel) or T_MAX)
                t = e
            assert int(sel[r].sum()) <= k  # never past the count
            if shortest <= k:
                assert split == 0, f"row {r}: a word split though one fits"
            else:  # no word fits: the first word in the draw, cut at the count
                assert split == 1 and int(sel[r].sum()) == k
        total_sel += int(sel.sum())
        total_real += int(selectable.sum())
    assert 0.09 < total_sel / total_real <= 0.16  # whole words stop short of the count now and then


def test_whole_word_with_all_starts_equals_token_level_count():
    ids, special, attn = make_batch(B=32, T=64, seed=9)
    ws = torch.ones_like(special)
    masked, labels = mask_tokens(ids, special, V, MASK, rate=0.15, generator=torch.Generator().manual_seed(0), word_starts=ws)
    check_invariants(ids, special, attn, masked, labels, 0.15)  # exact count: every word is one piece


@pytest.mark.parametrize("rate,ratios", [
    (0.0, (0.8, 0.1, 0.1)), (1.5, (0.8, 0.1, 0.1)), (-0.1, (0.8, 0.1, 0.1)), (float("nan"), (0.8, 0.1, 0.1)),
    (0.15, (0.8, 0.1, 0.05)), (0.15, (1.2, -0.1, -0.1)), (0.15, (0.5, 0.5)), (0.15, ("a", 0, 0)),
])
def test_bad_rate_or_ratios_raise_engine_error(rate, ratios):
    ids, special, _ = make_batch(B=2, T=10)
    with pytest.raises(EngineError) as e:
        mask_tokens(ids, special, V, MASK, rate=rate, ratios=ratios, generator=torch.Generator())
    assert "\n" not in str(e.value)


def test_ratios_sum_within_tolerance_accepted():
    """Ratios off 1 by float rounding (5e-7) mask exactly as 0.8/0.1/0.1 do; off by 1e-5 they are refused."""
    ids, special, attn = make_batch(B=8, T=40)
    near = mask_tokens(ids, special, V, MASK, ratios=(0.8, 0.1, 0.1 + 5e-7), generator=torch.Generator().manual_seed(3))
    exact = mask_tokens(ids, special, V, MASK, ratios=(0.8, 0.1, 0.1), generator=torch.Generator().manual_seed(3))
    check_invariants(ids, special, attn, *near, 0.15)
    assert torch.equal(near[0], exact[0]) and torch.equal(near[1], exact[1])
    with pytest.raises(EngineError, match="sum to"):
        mask_tokens(ids, special, V, MASK, ratios=(0.8, 0.1, 0.1 + 1e-5), generator=torch.Generator())


def test_shape_mismatch_raises_engine_error():
    ids, special, _ = make_batch(B=2, T=10)
    with pytest.raises(EngineError):
        mask_tokens(ids, special[:, :5], V, MASK)
    with pytest.raises(EngineError):
        mask_tokens(ids[0], special[0], V, MASK)


@st.composite
def masking_case(draw):
    B = draw(st.integers(1, 6))
    T = draw(st.integers(2, 40))
    rate = draw(st.floats(0.01, 1.0))
    w = draw(st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)).filter(lambda t: sum(t) > 0))
    ratios = tuple(x / sum(w) for x in w)
    seed = draw(st.integers(0, 2 ** 31))
    whole = draw(st.booleans())
    return B, T, rate, ratios, seed, whole


@settings(max_examples=150, deadline=None)
@given(masking_case())
def test_property_masking_invariants(case):
    B, T, rate, ratios, seed, whole = case
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(2, T + 1, (B,), generator=g)
    ids = torch.randint(5, 60, (B, T), generator=g)
    pos = torch.arange(T)[None, :]
    attn = (pos < lens[:, None]).long()
    special = (attn == 0) | (pos == 0) | (pos == lens[:, None] - 1) | (torch.rand(B, T, generator=g) < 0.1)
    ids[attn == 0] = PAD
    ws = torch.rand(B, T, generator=g) < 0.6 if whole else None
    masked, labels = mask_tokens(ids, special, 60, MASK, rate=rate, ratios=ratios, generator=g, word_starts=ws,
                                 special_ids=SPECIAL_IDS)
    check_invariants(ids, special, attn, masked, labels, rate, word_starts=ws)
    sel = labels != IGNORE_INDEX
    changed = masked != ids
    if ratios[0] == 0:
        assert not (masked[sel] == MASK).any()
    if ratios[1] == 0:  # no RANDOM: every change is a [MASK]
        assert (masked[changed] == MASK).all()
    if ratios[2] == 0 and ratios[1] == 0:
        assert (masked[sel] == MASK).all()
    assert not torch.isin(masked[sel & changed & (masked != MASK)], torch.tensor(SPECIAL_IDS)).any()


# ------------------------------------------------------------------ span masking (SpanBERT 3.1)
def test_span_lengths_are_geometric_truncated_at_ten():
    """SpanBERT's lengths: p (1 - p)^(l - 1) over 1..10, renormalised, so the mean is the paper's 3.8 words."""
    from engine.pretraining.masking import SPAN_MAX, SPAN_P, span_lengths
    n = 200_000
    got = span_lengths(n, torch.Generator().manual_seed(0))
    assert int(got.min()) == 1 and int(got.max()) == SPAN_MAX
    weights = [SPAN_P * (1 - SPAN_P) ** (length - 1) for length in range(1, SPAN_MAX + 1)]
    for length, w in zip(range(1, SPAN_MAX + 1), weights):
        expected = w / sum(weights)
        share = float((got == length).double().mean())
        assert abs(share - expected) < 5 * math.sqrt(expected * (1 - expected) / n), (length, share, expected)
    assert abs(float(got.double().mean()) - 3.8) < 0.03  # "a mean span length of 3.8" (SpanBERT 3.1)


def _spans(labels_row, span_row):
    """{span start: [positions]} of the selected positions of one row."""
    out = {}
    for t in (labels_row != IGNORE_INDEX).nonzero().squeeze(1).tolist():
        out.setdefault(int(span_row[t]), []).append(t)
    return out


def test_spans_are_whole_words_within_the_budget_and_replaced_whole():
    """Every span is a run of whole, consecutive words starting at a word start; a row selects at most its budget; MASK / RANDOM / SAME is one decision per span; over many rows about 80% of
    the spans are [MASK]."""
    from engine.pretraining.masking import span_selection
    g = torch.Generator().manual_seed(3)
    B, T, V, MASK = 400, 128, 30000, 4
    ids = torch.randint(10, V, (B, T), generator=g)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = special[:, -1] = special[:, 64] = True  # [CLS] A [SEP] B [SEP]
    ws = torch.rand(B, T, generator=g) < 0.6  # 40% of the pieces continue a word
    ws[:, 1] = ws[:, 65] = True
    state = g.get_state()
    masked, labels = mask_tokens(ids, special, V, MASK, rate=0.15, generator=g, word_starts=ws, spans=True)
    selectable = ~special
    k = torch.floor((selectable.sum(1).double() * 0.15) + 0.5).long()
    g.set_state(state)
    selected, span_of = span_selection(selectable, ws, k, g)
    assert torch.equal(selected, labels != IGNORE_INDEX)  # the same draws select the same spans
    starts = ws | special.roll(1, dims=1)
    kinds = {"mask": 0, "same": 0, "random": 0}
    for b in range(B):
        n = int(selected[b].sum())
        assert n <= k[b]  # never past the budget
        for first, pos in _spans(labels[b], span_of[b]).items():
            assert pos == list(range(first, first + len(pos)))  # consecutive, no [SEP] inside
            assert bool(starts[b, first]) and not bool(special[b, first:first + len(pos)].any())
            end = first + len(pos)
            assert end == T or bool(starts[b, end]) or bool(special[b, end])  # ends where a word ends
            got = masked[b, pos]
            if bool((got == MASK).all()):
                kinds["mask"] += 1
            elif torch.equal(got, ids[b, pos]):
                kinds["same"] += 1
            else:
                assert not bool((got == MASK).any()), "a span is replaced whole, never partly [MASK]"
                kinds["random"] += 1
    total = sum(kinds.values())
    assert total > 1000 and abs(kinds["mask"] / total - 0.8) < 0.04 and abs(kinds["same"] / total - 0.1) < 0.03


def test_span_masking_needs_word_starts():
    ids = torch.randint(10, 50, (2, 8))
    with pytest.raises(EngineError, match="word starts"):
        mask_tokens(ids, torch.zeros(2, 8, dtype=torch.bool), 50, 4, spans=True)


# ------------------------------------------------------------------ static against dynamic masking (RoBERTa 4.1)
def _batch_of(rows, T):
    """A batch like PretrainingData.batches of the given (instance number, ids) rows, right-padded to T."""
    B = len(rows)
    ids = torch.zeros(B, T, dtype=torch.long)
    am = torch.zeros(B, T, dtype=torch.long)
    for b, (_, r) in enumerate(rows):
        ids[b, :len(r)] = torch.tensor(r)
        am[b, :len(r)] = 1
    special = (am == 0) | (ids == 2) | (ids == 3)
    return {"input_ids": ids, "attention_mask": am, "special_tokens_mask": special, "word_starts": am.bool(),
            "index": torch.tensor([i for i, _ in rows])}


def test_static_masking_repeats_each_instances_mask_across_epochs_and_dynamic_does_not():
    """Static: an instance read again (another epoch, another batch, other neighbours and padding, another step's
    generator) gets the very same mask; dynamic: a new one. Static masks still differ between instances."""
    from engine.pretraining.masking import mask_batch
    g = torch.Generator().manual_seed(0)
    rows = [(i, [2] + torch.randint(10, 500, (int(n),), generator=g).tolist() + [3])
            for i, n in enumerate(torch.randint(20, 60, (12,), generator=g))]
    epoch1 = _batch_of(rows[:6], 62)
    epoch2 = _batch_of([rows[4], rows[9], rows[0], rows[2], rows[5], rows[1]], 70)  # shuffled, regrouped, padded anew
    kw = dict(vocab_size=500, mask_id=4, special_ids=[0, 1, 2, 3], rate=0.15)
    s1 = mask_batch(epoch1, generator=torch.Generator().manual_seed(1), static_seed=7, **kw)
    s2 = mask_batch(epoch2, generator=torch.Generator().manual_seed(2), static_seed=7, **kw)
    d1 = mask_batch(epoch1, generator=torch.Generator().manual_seed(1), **kw)
    d2 = mask_batch(epoch2, generator=torch.Generator().manual_seed(2), **kw)
    same_static = same_dynamic = 0
    for b2, i in enumerate([4, 9, 0, 2, 5, 1]):
        if i >= 6:
            continue
        n = len(rows[i][1])
        same_static += torch.equal(s1["labels"][i, :n], s2["labels"][b2, :n]) and torch.equal(s1["input_ids"][i, :n], s2["input_ids"][b2, :n])
        same_dynamic += torch.equal(d1["labels"][i, :n], d2["labels"][b2, :n])
    assert same_static == 5 and same_dynamic == 0
    masks = {tuple((s1["labels"][b] != IGNORE_INDEX).nonzero().squeeze(1).tolist()) for b in range(6)}
    assert len(masks) == 6  # instances are not all masked alike
    assert (s1["labels"] != IGNORE_INDEX).sum() == (d1["labels"] != IGNORE_INDEX).sum()  # the same budget per row


def test_static_masking_is_a_setting_the_loop_passes_and_ltr_refuses(monkeypatch):
    from engine.pretraining import loop
    from engine.pretraining.config import PretrainConfig, validate
    seen = []
    real = loop.mask_batch
    monkeypatch.setattr(loop, "mask_batch", lambda *a, **k: seen.append(k.get("static_seed")) or real(*a, **k))

    class Train:  # one batch of two instances, as PretrainingData.batches yields them
        def batches(self, micro, start_position=None, rank=0, world_size=1):
            yield _batch_of([(3, [2, 11, 12, 13, 14, 15, 3]), (8, [2, 21, 22, 23, 3])], 7)

    class Cache:
        config = {"seq_len": 8}
        vocab_size, mask_id, special_ids, train = 100, 4, [0, 1, 2, 3], Train()

    for static in (False, True):
        cfg = PretrainConfig.classroom(objective="mlm", static_masking=static, seed=5)
        list(loop.training_batches(Cache(), cfg, loop.objective("mlm"), 0, None, 0, 1, 2))
    assert seen == [None, 5]
    with pytest.raises(EngineError, match="static-masking"):
        validate(PretrainConfig.classroom(objective="ltr", static_masking=True))


def _long_word_rows(B, T, long_word, seed):
    """[CLS] pieces [SEP] rows of T tokens, one word of `long_word` pieces at a random place, every other word one
    piece; (ids, special, word_starts)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, V, (B, T), generator=g)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    ws = torch.ones(B, T, dtype=torch.bool)
    for b in range(B):
        at = int(torch.randint(1, T - 1 - long_word + 1, (1,), generator=g))
        ws[b, at + 1:at + long_word] = False
    return ids, special, ws


@pytest.mark.parametrize("spans", [False, True])
def test_a_word_longer_than_the_budget_never_passes_it_nor_the_steps_slots(spans):
    """A 32-token row at 25% may select 8 pieces; a word of 11 pieces drawn first used to be taken whole (11 > the
    step's 8 slots: the classroom span-masking study's whole-word and span rows failed). Now a longer word is skipped
    for one that fits; a row whose only words are longer is cut at its budget; every batch fits its slots."""
    from engine.pretraining.step_inputs import add_prediction_slots, max_predictions
    T, rate = 32, 0.25
    ids, special, ws = _long_word_rows(300, T, 11, seed=1)
    g = torch.Generator().manual_seed(2)
    for _ in range(5):
        masked, labels = mask_tokens(ids, special, V, MASK, rate=rate, generator=g, word_starts=ws, spans=spans)
        sel = labels != IGNORE_INDEX
        assert (sel.sum(1) <= 8).all() and (sel.sum(1) >= 1).all()
        batch = {"labels": labels, "attention_mask": torch.ones_like(ids)}
        assert add_prediction_slots(batch, max_predictions(T, rate))["mlm_n"] == int(sel.sum())
    # rows that are one long word each: its first k pieces, never more
    one = torch.zeros(4, T, dtype=torch.bool)
    one[:, 1] = True
    masked, labels = mask_tokens(ids[:4], special[:4], V, MASK, rate=rate, generator=g, word_starts=one, spans=spans)
    assert (labels != IGNORE_INDEX).sum(1).tolist() == [8] * 4
    assert ((labels != IGNORE_INDEX)[:, 1:9]).all()
