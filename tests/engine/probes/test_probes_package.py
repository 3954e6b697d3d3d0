"""engine.probes: the package's names are the ones the single probes module had, each the object of the module that
does its job, and the notebook API's probes resolve to them."""
import engine
from engine import probes
from engine.probes import attention_maps, cli, inputs, model_info, over_steps, predictions, scoring

PUBLIC = {  # name -> the module of engine/probes/ that defines it
    "fill_mask": predictions, "next_sentence": predictions, "MaskPredictions": predictions,
    "NextSentenceProbability": predictions,
    "attention": attention_maps, "attention_and_output": attention_maps, "compare_attention": attention_maps,
    "jensen_shannon": attention_maps, "AttentionTokens": attention_maps,
    "probe_set_accuracy": scoring, "compare_probe_set": scoring,
    "checkpoint_steps": over_steps, "probe_checkpoints": over_steps, "mask_probs_over_steps": over_steps,
    "model_name": model_info, "pair_objective": model_info, "heads": model_info, "heads_on_disk": model_info, "require_head": model_info,
    "encode_input": inputs, "forward_encoded": inputs,
    "main": cli,
}


def test_every_probe_name_imports_from_the_package_as_its_modules_object():
    for name, module in PUBLIC.items():
        assert getattr(probes, name) is getattr(module, name), name
    assert set(PUBLIC) | {"PROBE_SET"} == set(probes.__all__)
    from engine.probe_set import PROBE_SET
    assert probes.PROBE_SET is PROBE_SET


def test_the_notebook_api_and_the_command_reach_the_same_functions():
    for name in ("fill_mask", "next_sentence", "attention", "compare_attention", "probe_set_accuracy"):
        assert getattr(engine, name) is getattr(probes, name)
    from engine.commands import COMMANDS
    module, _ = COMMANDS["probe"]
    assert module == "engine.probes" and probes.main is cli.main
