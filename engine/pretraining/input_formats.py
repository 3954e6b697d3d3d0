"""RoBERTa's input formats (Liu et al. 2019, section 4.2 and Table 2), each described once: how the documents are cut
into pre-training instances. `--input-format` (PretrainConfig.input_format, PrepareConfig.input_format); the data
cache and a prepared folder record it (a different format is different data); engine/pretraining/instances.py builds
each from these properties, never from the name.

| name           | RoBERTa's name  | an instance                                                         | pair task |
|----------------|-----------------|---------------------------------------------------------------------|-----------|
| segment-pair   | SEGMENT-PAIR    | BERT's: two segments of several sentences each (google-research/bert | NSP, SOP  |
|                |                 | chunking); without a pair task one window of a document (today's     | or none   |
|                |                 | No-NSP instances)                                                    |           |
| sentence-pair  | SENTENCE-PAIR   | two natural sentences: A one sentence, B the next (IsNext) or a      | NSP, SOP  |
|                |                 | sentence of another document (NotNext); SOP: consecutive, swapped    |           |
| full-sentences | FULL-SENTENCES  | full sentences packed contiguously up to T tokens, running on into   | none      |
|                |                 | the next document after a separator token                           |           |
| doc-sentences  | DOC-SENTENCES   | the same, never crossing a document's end (rows there are shorter),  | none      |
|                |                 | batched by tokens                                                   |           |

RoBERTa's findings (Table 2, BERT-BASE size on BookCorpus + Wikipedia): single sentences (SENTENCE-PAIR) hurt; removing
NSP (FULL-SENTENCES) matches or slightly improves; DOC-SENTENCES is best, slightly ahead of FULL-SENTENCES.

Where ours departs, on purpose:
- The separator between documents (FULL-SENTENCES) is [SEP], the token that ends every instance; it is a special token
  (never masked, never predicted: engine.pretraining.cache marks it so), as are [CLS] and the final [SEP]. RoBERTa's
  separator is its `</s>`, which fairseq may mask.
- The documents run on in the corpus's order, the held-out documents among themselves (RoBERTa: its corpus's order).
- Batch sizes: RoBERTa raises the batch size of DOC-SENTENCES where rows near a document's end are short, and of
  SENTENCE-PAIR, whose inputs are much shorter than T, so that a batch holds about the tokens of the formats with
  full rows. Ours batches those two formats by tokens (`batch_by_tokens`): a step takes instances, in the epoch's
  order, while their tokens fit in batch_size x seq_len (the tokens of batch_size full rows; at least one instance),
  so the number of sequences per step varies and the tokens per step stay about constant
  (engine.pretraining.cache.PretrainingData.batches). The held-out evaluation keeps its fixed instances. The budget
  is full rows, not FULL-SENTENCES' own tokens per batch (RoBERTa's reference): at 512 tokens whole sentences fill
  a row almost completely, but at the classroom's short rows a sentence is a large share of one, so FULL-SENTENCES
  rows (a fixed batch_size of them) hold fewer tokens than a DOC-SENTENCES step; a comparison at equal tokens reads
  the runs' `tokens` (real tokens seen, in metrics.jsonl), not their steps.
- `short_seq_prob` keeps its meaning for the packed formats (a row's target length is drawn short with that chance;
  RoBERTa trains on full-length inputs only: give --short-seq-prob 0 for its recipe); SENTENCE-PAIR ignores it (two
  sentences are short already). A sentence longer than a row is cut into row-length pieces (the only place a packed
  row starts or ends inside a sentence); a pair of sentences longer than a row is truncated as BERT's pairs are.
- With an objective without a pair task (mlm, ltr) SEGMENT-PAIR, the default, is today's No-NSP windows, so every run
  and every data folder made before this setting are unchanged; RoBERTa's Table 2 runs SEGMENT-PAIR with NSP only.
"""
from dataclasses import dataclass

from engine.errors import EngineError
from engine.objectives import OBJECTIVES


@dataclass(frozen=True)
class InputFormat:
    name: str  # the --input-format value, run.json's "input_format"
    label: str  # RoBERTa's name for it, as pages and study tables show it
    words: str  # what an instance is, one line (the flag's help)
    pairs: bool  # made for an objective with a pair task (NSP, SOP): two segments A/B with a label
    singles: bool  # made for an objective without one: one segment per instance
    one_sentence: bool = False  # each segment is one natural sentence
    packed: bool = False  # rows packed with full sentences up to the sequence length
    crosses_documents: bool = False  # a row may run on into the next document, after a separator token
    batch_by_tokens: bool = False  # a step holds about batch_size x seq_len tokens, as many instances as that takes


SEGMENT_PAIR = InputFormat("segment-pair", "SEGMENT-PAIR", "BERT's segment pairs of several sentences (without a pair "
                           "task: windows of a document)", pairs=True, singles=True)
SENTENCE_PAIR = InputFormat("sentence-pair", "SENTENCE-PAIR", "pairs of single natural sentences, batched by tokens",
                            pairs=True, singles=False, one_sentence=True, batch_by_tokens=True)
FULL_SENTENCES = InputFormat("full-sentences", "FULL-SENTENCES", "full sentences packed up to the sequence length, "
                             "crossing documents after a [SEP]", pairs=False, singles=True, packed=True,
                             crosses_documents=True)
DOC_SENTENCES = InputFormat("doc-sentences", "DOC-SENTENCES", "full sentences packed up to the sequence length within "
                            "one document, batched by tokens", pairs=False, singles=True, packed=True, batch_by_tokens=True)
INPUT_FORMATS = {f.name: f for f in (SEGMENT_PAIR, SENTENCE_PAIR, FULL_SENTENCES, DOC_SENTENCES)}
DEFAULT = SEGMENT_PAIR  # what every run and data folder made before the setting existed was built with

HELP = ("RoBERTa's input formats (Liu et al. 2019, section 4.2): " +
        "; ".join(f"{f.name}: {f.words}" for f in INPUT_FORMATS.values()) +
        " (engine/pretraining/input_formats.py)")


def input_format(name) -> InputFormat:
    """The InputFormat called `name` (or `name` itself when it is one; None: the default); EngineError naming the choices."""
    if isinstance(name, InputFormat):
        return name
    if name is None:
        return DEFAULT
    if name not in INPUT_FORMATS:
        raise EngineError(f"unknown input format '{name}'; choose one of {', '.join(INPUT_FORMATS)}")
    return INPUT_FORMATS[name]


def check_format(name, obj) -> InputFormat:
    """The format `name` if it can feed objective `obj` (an engine.objectives.Objective), else one line naming the fix:
    a pair task needs a format of segment pairs, a format of single rows needs an objective without a pair task."""
    fmt = input_format(name)
    if obj.pairs and not fmt.pairs:
        singles = ", ".join(o.name for o in OBJECTIVES.values() if not o.pairs)
        pairs = ", ".join(f.name for f in INPUT_FORMATS.values() if f.pairs)
        raise EngineError(f"--input-format {fmt.name} makes single rows with no pair task, but --objective {obj.name} has one "
                          f"({obj.pair.upper()}); use an objective without one ({singles}: RoBERTa drops NSP with "
                          f"{fmt.label}), or a pair format ({pairs})")
    if not obj.pairs and not fmt.singles:
        with_pairs = ", ".join(o.name for o in OBJECTIVES.values() if o.pairs)
        singles = ", ".join(f.name for f in INPUT_FORMATS.values() if f.singles)
        raise EngineError(f"--input-format {fmt.name} makes sentence pairs for a pair task, but --objective {obj.name} has "
                          f"none; use an objective with one ({with_pairs}: RoBERTa keeps NSP with {fmt.label}), or a "
                          f"format of single rows ({singles})")
    return fmt


def keyed(name) -> dict:
    """What a data key records of the format: nothing for the default (so data built before the setting keep their
    keys), its name for any other (a different format is different data)."""
    fmt = input_format(name)
    return {} if fmt is DEFAULT else {"input_format": fmt.name}
