"""With tlm_prompt = "nearest", a fine-tuned model is prompted with the hardware it was tuned
on nearest the host; by default, with the host's."""
import dataclasses
import json
import os

import pytest

from tlmir.errors import ModelError, ScheduleError
from tlmir.lm.generate import Generator
from tlmir.lm.language import hw_prompt
from tlmir.lm.prompt_hardware import demonstrated_hardware, prompt_hardware, tuned_hardware
from tlmir.lm.registry import TUNED_MODEL, load_model
from tlmir.runtime.target import CPU_CLASSES, SearchParams

ZEN3, ZEN4, SPR, ICX = (dataclasses.replace(CPU_CLASSES[n], cores=2)
                        for n in ("zen3", "zen4", "sapphire-rapids", "ice-lake-sp"))


def _prompt(hw) -> str:
    return " ".join(hw_prompt(hw))


def _meta(*tuned) -> dict:
    return {"sft": {"hardware": [_prompt(h) for h in tuned]}}


def test_the_hardware_prompts_of_demonstrations():
    s = ("<s> v4 task input A 8 stage B elem sp 8 read A i {} quality 0 sketch 0 "
         "tile B.i 8 = 2 1 </s>")
    sentences = [s.format(_prompt(ZEN4)), s.format(_prompt(ZEN3)).replace(" quality 0", ""),
                 s.format(_prompt(ZEN4))]
    assert demonstrated_hardware(sentences) == sorted([_prompt(ZEN3), _prompt(ZEN4)])


def test_a_host_the_model_was_tuned_on_is_prompted_as_itself():
    assert prompt_hardware(SPR, _meta(ZEN4, SPR)) == SPR
    assert prompt_hardware(SPR, {}) == SPR  # a pre-trained model: no class is better known
    assert prompt_hardware(SPR, _meta(ZEN3)) == SPR  # no tuned class of its ISA


def test_another_host_is_prompted_as_the_nearest_tuned_class_of_its_isa():
    assert prompt_hardware(SPR, _meta(ZEN3, ZEN4)) == ZEN4
    assert prompt_hardware(SPR, _meta(ZEN4, ICX)) == ICX          # 48K / 1280K is nearer 48K / 2048K
    big = dataclasses.replace(CPU_CLASSES["zen3"], cores=16)
    assert prompt_hardware(big, _meta(ZEN3, ZEN4, dataclasses.replace(ZEN3, cores=8))).cores == 8


def test_a_malformed_hardware_list_is_named():
    with pytest.raises(ModelError, match="sft.hardware must be a list"):
        tuned_hardware({"sft": {"hardware": "hw cpu avx512"}})
    with pytest.raises(ModelError, match="'hw cpu avx512 cores 2' lacks cores, l1 or l2"):
        prompt_hardware(SPR, {"sft": {"hardware": ["hw cpu avx512 cores 2"]}})


def test_the_shipped_model_lists_the_hardware_of_its_demonstrations():
    with open(os.path.join(TUNED_MODEL, "demonstrations.jsonl")) as f:
        sentences = [json.loads(line)["sentence"] for line in f]
    model, tok, meta = load_model(TUNED_MODEL)
    assert tuned_hardware(meta) == demonstrated_hardware(sentences)
    assert Generator.for_model(model, tok, meta, ICX).prompt_hw == ICX  # the default: the host's
    gen = Generator.for_model(model, tok, meta, ICX, prompt="nearest")
    assert gen.hw == ICX and gen.prompt_hw == SPR  # tuned on SPR's class, ICX's nearest


def test_search_params_name_the_prompt_a_tlm_search_writes():
    assert SearchParams().tlm_prompt == "host"
    with pytest.raises(ScheduleError, match="tlm_prompt must be 'host' or 'nearest', got 'zen4'"):
        SearchParams(tlm_prompt="zen4")
