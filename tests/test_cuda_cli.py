"""The command line for GPU targets without a GPU: `show --target cuda:sm_90 --sample N`
prints sampled kernels as CUDA C, `tune --dry-run` compiles and resource-checks a GPU
space, and measuring for a GPU where there is none is one clear line."""
import json

import pytest

from tlmir.cli import main

from gpuutil import has_gpu


def test_show_prints_sampled_kernels_as_cuda_c(capsys):
    argv = ["show", "--op", "conv2d_bias_relu", "--shape", "1,8,10,10,16,3,3", "--param", "padding=1",
            "--target", "cuda:sm_90", "--sample", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "#   0: relu:skip, bias:inline, conv:tile_fuse, pad:inline" in out
    assert out.count("# sample ") == 3 and out.count('extern "C" __global__') == 3
    assert out.count("# CUDA C for sm_90 (NVRTC: conv2d_bias_relu_kernel0: grid ") == 3
    assert "fmaxf(" in out and "__syncthreads();" in out  # relu in the kernel, shared tiles


def test_show_of_a_replayed_schedule_for_a_gpu(capsys, tmp_path):
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps([
        {"prim": "split", "stage": "C", "args": {"axis": "i", "factor": 4}},
        {"prim": "bind", "stage": "C", "args": {"axis": "i.outer", "tag": "blockIdx.x"}},
        {"prim": "bind", "stage": "C", "args": {"axis": "i.inner", "tag": "threadIdx.x"}}]))
    assert main(["show", "--op", "matmul", "--shape", "8,8,8", "--steps", str(steps), "--target", "cuda:sm_80"]) == 0
    out = capsys.readouterr().out
    assert "s['C'].bind('i.outer', 'blockIdx.x')" in out and "grid 2x1x1, block 4x1x1" in out


def test_tune_dry_run_compiles_and_checks_a_gpu_space(capsys):
    argv = ["tune", "--op", "softmax", "--shape", "16,64", "--target", "cuda:sm_90", "--dry-run",
            "--trials", "5", "--json"]
    assert main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert len(rep["sketches"]) == 4 and rep["candidates"] == 5
    assert rep["compiled"] == 5 and rep["rejected"] == {} and rep["failed"] == []
    assert rep["kernels"] == 15 and len(rep["compile_seconds"]) == 5  # max, sum, out: three kernels
    assert main(["tune", "--op", "matmul", "--shape", "32,32,32", "--target", "cuda:sm_80", "--dry-run",
                 "--trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 candidates: 2 compiled" in out and "0 over the limits (0.0%)" in out and "example: sketch 0" in out


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU")
def test_tuning_for_a_gpu_without_one_says_so(capsys):
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--target", "cuda:sm_90", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tlmir: error: measuring programs for sm_90 needs a GPU and there is none here")
    assert "--dry-run" in err and err.count("\n") == 1
