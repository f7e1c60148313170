"""`tlmir generate` / `train sft` end to end, and their errors."""
import json
import os

import torch

from tlmir import ops
from tlmir.cli import main
from tlmir.lm.checkpoint import save_checkpoint
from tlmir.lm.model import GPT, GPTConfig
from tlmir.lm.tokenizer import build_tokenizer
from tlmir.runtime.target import host_hardware
from tlmir.runtime.task import Task


def _model_dir(tmp_path, tasks, name="m"):
    tok = build_tokenizer(tasks, host_hardware())
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=512))
    d = tmp_path / name
    save_checkpoint(model, str(d))
    tok.save(str(d / "tokenizer.json"))
    return d


def test_generate_json_counts(tmp_path, capsys):
    d = _model_dir(tmp_path, [Task.from_op(ops.matmul(16, 16, 16))])
    assert main(["generate", "--model", str(d), "--op", "matmul", "--shape", "16,16,16", "-n", "4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["generated"] == out["well_formed"] == out["valid"] == out["verified"] == 4
    assert out["programs_per_second"] > 0
    assert len(out["programs"]) == 4  # the programs themselves, traces as JSON objects, not strings
    assert all(p["sentence"].startswith("<s>") and isinstance(p["trace"]["decisions"], list)
               for p in out["programs"])


def test_generate_rejects_mismatched_tokenizer_and_truncated_checkpoint(tmp_path, capsys):
    d = _model_dir(tmp_path, [Task.from_op(ops.matmul(16, 16, 16))])
    other = _model_dir(tmp_path, [Task.from_op(ops.conv2d_nchw(1, 3, 8, 8, 4, 3, 3))], "o")
    os.replace(other / "tokenizer.json", d / "tokenizer.json")
    assert main(["generate", "--model", str(d), "--op", "matmul", "--shape", "16,16,16"]) == 2
    assert "does not match the tokenizer" in capsys.readouterr().err
    e = _model_dir(tmp_path, [Task.from_op(ops.matmul(16, 16, 16))], "t")
    data = (e / "model.safetensors").read_bytes()
    (e / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert main(["generate", "--model", str(e), "--op", "matmul", "--shape", "16,16,16"]) == 2
    assert str(e) in capsys.readouterr().err


def test_shipped_base_model_loads_and_generates(capsys):
    assert main(["generate", "--model", "base", "--op", "matmul", "--shape", "32,32,32", "-n", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["generated"] == out["valid"] == out["verified"] == 2


def test_train_sft_from_a_demonstrations_file(tmp_path, capsys):
    import random

    from tlmir.lm.language import VERSION, trace_to_sentence
    from tlmir.schedule.space import SearchSpace
    from tlmir.workloads import split_tasks
    task = next(t for t in split_tasks("held-out") if t.name.startswith("softmax"))
    space, rng = SearchSpace(task.outputs), random.Random(0)

    def demos(version):
        data = tmp_path / f"demos-{version}.jsonl"
        data.write_text("".join(json.dumps({"key": task.key, "task": task.name, "sentence": trace_to_sentence(
            task, host_hardware(), space.sample(rng)[1]).replace(f"<s> {VERSION} ", f"<s> {version} ")})
            + "\n" for _ in range(4)))
        return str(data)
    assert main(["train", "sft", "--data", demos("v3"), "--out", str(tmp_path / "x"), "--epochs", "1"]) == 2
    assert "a sentence of version 'v3' cannot be encoded" in capsys.readouterr().err
    assert main(["train", "sft", "--data", demos(VERSION), "--out", str(tmp_path / "m"), "--epochs", "2"]) == 0
    assert '"completed": true' in capsys.readouterr().out
    assert main(["generate", "--model", str(tmp_path / "m"), "--op", "softmax", "--shape",
                 ",".join(map(str, task.outputs[0].shape)), "-n", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["verified"] == 2
