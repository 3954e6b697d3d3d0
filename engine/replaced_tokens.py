"""The probe of an ELECTRA discriminator: which tokens of a text were replaced? (Clark et al. 2020, section 2: the
discriminator's task, replaced-token detection, on a text the user writes or alters.)

`load_detector` reads a checkpoint of an `--objective electra` run: its encoder as engine.load reads any BERT, and the
replaced-token head from its `discriminator/` folder (engine/electra.py). `replaced_tokens` gives, for each token of a
text, the discriminator's P(replaced). `swap_word` replaces one word of a text with another, so a page (or a class)
can plant a replacement and see whether the discriminator finds it. A checkpoint without the head (any other
objective's) is one line naming the fix.
"""
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.checkpoint import Bundle, load
from engine.electra import DISCRIMINATOR_DIR, DiscriminatorHead, load_module, read_tensors
from engine.errors import EngineError


@dataclass
class Detector:
    bundle: Bundle  # the discriminator's encoder and tokenizer (engine.load)
    head: DiscriminatorHead  # its replaced-token head


def has_detector(path) -> bool:
    """Whether the checkpoint folder `path` (a resolved checkpoint, as engine.load's bundle.path) holds ELECTRA's
    replaced-token head."""
    return (Path(path) / DISCRIMINATOR_DIR / "model.safetensors").is_file()


def load_detector(path_or_bundle, device="cpu") -> Detector:
    """The discriminator of an ELECTRA run (a run folder, a checkpoint folder, or its engine.load bundle)."""
    bundle = path_or_bundle if isinstance(path_or_bundle, Bundle) else load(path_or_bundle, device=device)
    if not has_detector(bundle.path):
        raise EngineError(f"{bundle.path} has no replaced-token head ({DISCRIMINATOR_DIR}/); only an --objective electra "
                          f"run's checkpoints have one: pick such a run, or probe this model with fill-mask")
    d = Path(bundle.path) / DISCRIMINATOR_DIR
    head = DiscriminatorHead(bundle.config.hidden_size)
    load_module(head, read_tensors(d), {k: f"discriminator_predictions.{k}" for k in head.state_dict()}, d)
    return Detector(bundle=bundle, head=head.to(bundle.model.device).eval())


@torch.no_grad()
def replaced_tokens(detector: Detector, text: str, max_length: int = 128) -> list:
    """[{"token", "p_replaced"}] for each token of `text` ([CLS] and [SEP] included: the discriminator judges them
    too), P(replaced) = sigmoid of the head's logit."""
    enc = detector.bundle.tokenizer.encode(text, max_length=max_length)
    model = detector.bundle.model
    ids = torch.tensor([enc.ids], device=model.device)  # (1, T)
    hidden = model.bert(ids, torch.zeros_like(ids), torch.ones_like(ids)).last_hidden_state  # (1, T, H)
    p = torch.sigmoid(detector.head(hidden)[0].float()).tolist()  # (T,)
    return [{"token": t, "p_replaced": q} for t, q in zip(enc.tokens, p)]


def swap_word(text: str, index: int, word: str) -> str:
    """`text` with its `index`-th whitespace-separated word replaced by `word` (EngineError outside the text)."""
    words = text.split()
    if not 0 <= index < len(words):
        raise EngineError(f"word {index} is outside the text's {len(words)} words; pick one from 0 to {len(words) - 1}")
    words[index] = word
    return " ".join(words)
