"""engine.probes.model_info.pair_objective: the pair head's question, from the run the model belongs to."""
import json
from types import SimpleNamespace

from engine.objectives import LTR, MLM_NSP, MLM_SOP
from engine.probes.model_info import pair_objective


def _run(folder, objective):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "pretrain", "objective": objective}))
    return folder


def test_the_pair_objective_is_the_runs_and_bert_s_nsp_elsewhere(tmp_path):
    sop = _run(tmp_path / "sop", MLM_SOP.name)
    ck = sop / "checkpoints" / "step-4"
    ck.mkdir(parents=True)
    assert pair_objective(SimpleNamespace(path=str(sop))) is MLM_SOP
    assert pair_objective(SimpleNamespace(path=str(ck))) is MLM_SOP  # a checkpoint of the run
    assert pair_objective(SimpleNamespace(path=str(_run(tmp_path / "nsp", MLM_NSP.name)))) is MLM_NSP
    assert pair_objective(SimpleNamespace(path=str(_run(tmp_path / "ltr", LTR.name)))) is MLM_NSP  # no pair task: BERT's
    assert pair_objective(SimpleNamespace(path="minilm")) is MLM_NSP
    assert pair_objective(SimpleNamespace(path=str(_run(tmp_path / "odd", ["not", "a", "name"])))) is MLM_NSP
    assert MLM_SOP.pair_answers == ("in order", "swapped") and MLM_NSP.pair_answers[0] == "IsNext"
