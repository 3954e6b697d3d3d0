"""BERT Studio engine: BERT pre-training, fine-tuning, probes and features in plain PyTorch (no UI imports).

The notebook API (see README and ../shared/design.md): BertConfig, load_corpus, train_tokenizer, Tokenizer,
load, save, mask_tokens, fill_mask, next_sentence, attention, extract_features, pretrain, finetune; the attention
analyses attention_rollout, head_statistics, head_importance, value_weighted_attention, word_level (engine/analysis.py).
"""
from engine.errors import EngineError
from engine.config import BertConfig, PRESETS
from engine.tokenizer import Tokenizer, train_tokenizer
from engine.corpora import Corpus, load_corpus, load_bbc_labeled
from engine.model import BertForPreTraining, BertModel, BertOutput
from engine.checkpoint import Bundle, load, save
from engine.pretraining_data import (
    OBJECTIVES, PretrainingCache, PretrainingData, build_pretraining_data, fixed_eval_masking, mask_batch, mask_tokens,
    open_pretraining_data,
)
from engine.probes import attention, compare_attention, fill_mask, next_sentence, probe_set_accuracy
from engine.features import extract_features
# the run entry points; as attributes of `engine` these names are the functions (the modules stay importable as
# `engine.pretrain` / `engine.finetune` through `from engine.pretrain import ...`)
from engine.pretrain import PretrainConfig, pretrain
from engine.finetune import FinetuneConfig, finetune
from engine.analysis import (
    attention_rollout, head_importance, head_statistics, value_weighted_attention, word_level,
)
