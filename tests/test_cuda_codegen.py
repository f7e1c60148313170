"""The CUDA backend without a GPU: GPU-scheduled loop programs become readable CUDA C that
NVRTC compiles to PTX and a cubin for sm_80 and sm_90, with what each kernel uses read
back and checked against the target's limits; running one where there is no GPU says so."""
import numpy as np
import pytest

import tlmir
from tlmir import te
from tlmir.ir import expr as E
from tlmir.ir import stmt as S
from tlmir.codegen_cuda import nvrtc
from tlmir.codegen_cuda.nvrtc import compile_cuda, parse_resources
from tlmir.codegen_cuda.render import render
from tlmir.errors import ArgumentError, BuildError, DeviceError, ResourceError

from gpuutil import cooperative_fetch, gpu_matmul, has_gpu, row_reduce


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_tiled_matmul_is_readable_cuda_that_nvrtc_compiles(arch):
    s, args = gpu_matmul(vec=4, tj=(2, 1, 8, 1), tk=(2, 1, 4))
    f = tlmir.build(s, args, target=f"cuda:{arch}")
    src = f.source
    assert 'extern "C" __global__ void __launch_bounds__(16) main_kernel0(' in src
    assert "const float* __restrict__ A" in src and "float* __restrict__ C" in src
    assert "__shared__ __align__(16) float A_shared[32];" in src and "float C_local[4];" in src
    assert src.count("__syncthreads();") == 2 and "const int bx = blockIdx.x;" in src and "const int tx = threadIdx.x;" in src
    assert "*reinterpret_cast<float4*>(&A_shared[" in src and "*reinterpret_cast<const float4*>(&B[" in src
    assert f.ptx.count(".entry main_kernel0") == 1 and f".target {arch}" in f.ptx
    assert f.cubin[:4] == b"\x7fELF"
    (res,) = f.resources
    assert res.shared_bytes == 2 * 32 * 4 and 8 < res.registers <= 255
    assert "main_kernel0: grid 4x1x1, block 16x1x1" in f.describe()


def test_a_round_compiled_ahead_in_a_process_pool_is_what_compile_cuda_then_returns():
    import concurrent.futures
    import multiprocessing
    sources = [tlmir.build(*gpu_matmul(vec=v), target="cuda:sm_90").source for v in (1, 2)]
    broken = sources[0].replace("__syncthreads();", "__syncthreads(", 1)
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        binaries = nvrtc.compile_many(sources + [broken, sources[1]], "sm_90", pool, timeout=120)
    assert len(binaries) == 2  # the duplicate compiled once; the broken one is left to its trial
    try:
        nvrtc.remember(binaries)
        for src in sources:
            ahead = compile_cuda(src, "sm_90")
            assert ahead is binaries[nvrtc._memo_key(src, "sm_90")] and ahead.cubin[:4] == b"\x7fELF"
        with pytest.raises(BuildError, match="NVRTC could not compile"):
            compile_cuda(broken, "sm_90")
    finally:
        nvrtc._COMPILED.clear()


def test_a_cross_thread_reduction_compiles_with_its_shared_slots():
    s, args = row_reduce(6, 37, 8)
    f = tlmir.build(s, args, target="cuda:sm_90")
    assert "fmaxf(" in f.source and "__uint_as_float(0x7f800000u)" in f.source
    assert f.resources[0].shared_bytes == 8 * 4


def test_intermediate_stages_are_kernels_of_their_own_with_a_workspace():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: te.exp(B[i]) + B[63 - i], name="C")
    s = tlmir.create_schedule(C)
    for T in (B, C):
        bx, tx = s[T].split(T.op.axis[0], factor=32)
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(tx, "threadIdx.x")
    f = tlmir.build(s, [A, C], target="cuda:sm_90")
    assert [k.name for k in f.unit.kernels] == ["main_kernel0", "main_kernel1"]
    assert [b.name for b in f.unit.workspace] == ["B"] and "expf(" in f.source


def test_floor_division_of_possibly_negative_values_uses_the_helpers():
    A, B = S.Buffer("A", (16,), "float32"), S.Buffer("B", (16,), "float32")
    i = E.Var("i")
    body = S.Store(B, i, E.Load(A, E.FloorDiv(i - E.const(5), E.const(3)) + E.const(2))
                   + E.Load(A, E.FloorMod(i, E.const(4))))
    func = S.PrimFunc("floors", [A, B], S.For(i, E.const(0), E.const(16), "thread_binding", body, "threadIdx.x"))
    src = render(func).source
    assert "B[tx] = A[tl_floordiv(tx - 5, 3) + 2] + A[tx % 4];" in src and "template <typename T>" in src
    assert compile_cuda(src, "sm_90").resources["floors_kernel0"].registers > 0


def test_over_the_limits_is_refused_before_any_launch():
    s, args = gpu_matmul(M=64, N=64, K=8, ti=(1, 1, 64, 1), tj=(1, 1, 32, 2), tk=(1, 1, 8), vec=1)
    with pytest.raises(ResourceError, match=r"blocks of 2048x1x1 = 2048 threads, over the 1024 a sm_90 block"):
        tlmir.build(s, args, target="cuda:sm_90")
    s, args = gpu_matmul(M=128, N=128, K=64, ti=(1, 1, 16, 8), tj=(1, 1, 16, 8), tk=(1, 1, 64), vec=4)
    with pytest.raises(ResourceError, match=r"uses 65536 bytes of shared memory per block, over the 49152"):
        tlmir.build(s, args, target="cuda:sm_90")


def test_an_unbound_program_is_named_and_default_scopes_follow_tvm():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(BuildError, match="computing 'B' runs on no GPU thread; bind its loops"):
        tlmir.build(tlmir.create_schedule(B), [A, B], target="cuda:sm_90")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = tlmir.create_schedule(C)
    s[C].bind(C.op.axis[0], "threadIdx.x")
    s[B].compute_at(s[C], C.op.axis[0])  # inside a thread: B is local to it
    assert "float B[1];" in tlmir.build(s, [A, C], target="cuda:sm_90").source
    s = tlmir.create_schedule(C)
    bo, bi = s[C].split(C.op.axis[0], factor=4)
    s[C].bind(bo, "blockIdx.x")
    s[C].bind(bi, "threadIdx.x")
    s[B].compute_at(s[C], bo)  # inside a block only: B is shared by its threads
    src = tlmir.build(s, [A, C], target="cuda:sm_90").source
    assert "__shared__ __align__(16) float B[4];" in src and src.count("__syncthreads();") == 2


def test_nvrtc_errors_carry_the_log_and_resources_parse():
    with pytest.raises(BuildError, match=r"could not compile the kernel for sm_90:\n.*undefined_thing"):
        compile_cuda('extern "C" __global__ void k(float* a) { a[0] = undefined_thing; }', "sm_90", "bad")
    with pytest.raises(BuildError, match="cannot compile for sm_11"):
        compile_cuda("", "sm_11")
    log = ("ptxas info    : Compiling entry function 'k0' for 'sm_90'\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n"
           "ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
           "ptxas info    : Used 8 registers\n"
           "ptxas info    : Compiling entry function 'k2' for 'sm_90'\n"
           "ptxas info    : Used 128 registers, used 1 barriers, 128 bytes cumulative stack size, 17408 bytes smem\n")
    r = parse_resources(log)
    assert (r["k0"].registers, r["k0"].shared_bytes, r["k0"].spill_bytes) == (40, 2048, 8)
    assert (r["k1"].registers, r["k1"].shared_bytes) == (8, 0)
    assert (r["k2"].registers, r["k2"].shared_bytes) == (128, 17408)


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU")
def test_running_without_a_gpu_says_so_in_one_line():
    s, args = gpu_matmul()
    f = tlmir.build(s, args, target="cuda:sm_90")
    a, b, c = np.ones((16, 8), "float32"), np.ones((8, 16), "float32"), np.zeros((16, 16), "float32")
    with pytest.raises(DeviceError, match=r"running a GPU program needs a GPU and there is none here \(no CUDA driver"):
        f(a, b, c)
    with pytest.raises(ArgumentError, match="expected 3 arrays"):
        f(a, b)
    with pytest.raises(ArgumentError, match="expected a numpy array or a GPU array"):
        f(a, b, [0.0])


@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_on_a_gpu_the_kernel_matches_numpy():
    s, args = gpu_matmul()
    f = tlmir.build(s, args, target="cuda")
    a, b = np.random.rand(16, 8).astype("float32"), np.random.rand(8, 16).astype("float32")
    c = np.zeros((16, 16), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert f.benchmark(a, b, c, repeat=3).median > 0
