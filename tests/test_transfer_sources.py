"""Transfer sources: the fastest program of each training task per hardware, rewritten for a
new task's shape and measured by `tlm` beside the model's own programs."""
import lzma
import random
import shutil

import numpy as np
import pytest

from tlmir import ops
from tlmir.errors import RecordError, ScheduleError
from tlmir.lm.registry import TUNED_MODEL
from tlmir.runtime.records import Record
from tlmir.runtime.target import HardwareParams, SearchParams
from tlmir.runtime.task import Task
from tlmir.schedule.decider import Trace
from tlmir.schedule.space import SearchSpace
from tlmir.search.strategy import make_strategy
from tlmir.workloads import split_tasks
from tlmir.workloads.common import task_name
from tlmir.search.transfer import epilogue_form
from tlmir.search.transfer_sources import (SOURCES_FILE, Source, SourceLibrary, op_family, shape_distance,
                                          shape_signature, source_category)

from schedutil import assert_program_matches

HW2 = HardwareParams(cores=2)
AVX2 = HardwareParams(isa="avx2", vector_lanes=8, cores=2)


def _task(op) -> Task:
    """A task named as the workloads name theirs (family, shape, kernel, groups)."""
    return Task.from_op(op, name=task_name(op))


def _record(task: Task, trace, seconds: float, hw: HardwareParams = HW2) -> Record:
    return Record(task_key=task.key, task_name=task.name, hw_key=hw.key, trace=trace.to_json(),
                  seconds=[seconds], best=seconds)


def _dense_records(tasks: list[Task], per_task: int = 4, hw: HardwareParams = HW2) -> list[Record]:
    rng, out = random.Random(1), []
    for t in tasks:
        space = SearchSpace(t.outputs, hw)
        for i in range(per_task):
            out.append(_record(t, space.sample(rng)[1], 1e-3 * (i + 1), hw))
    return out


def test_a_grouped_or_strided_conv_is_its_own_category():
    grouped = _task(ops.conv2d_bias_relu(1, 8, 10, 10, 8, 3, 3, padding=1, groups=4))
    plain = _task(ops.conv2d_bias_relu(1, 8, 10, 10, 8, 3, 3, padding=1))
    strided = _task(ops.conv2d_bias_relu(1, 8, 10, 10, 8, 3, 3, stride=2, padding=1, groups=4))
    dense = _task(ops.dense(16, 32, 8))
    assert source_category(plain) == "conv2d_bias_relu_3x3"
    assert source_category(grouped) == "conv2d_bias_relu_3x3_grouped"
    assert source_category(strided) == "conv2d_bias_relu_3x3_grouped_strided"
    assert source_category(dense) == "dense"
    for name, want in [("conv2d_nchw_1x64x56x56_k128_1x1_s2_p0", "conv2d_nchw_1x1_strided"),
                       ("conv2d_bias_relu_1x128x17x17_k128_1x7_s1_p0x3", "conv2d_bias_relu_1x7"),
                       ("depthwise_conv2d_1x576x14x14_3x3_s1_p1", "depthwise_conv2d_3x3")]:
        assert source_category(next(t for t in split_tasks("train") + split_tasks("held-out")
                                    if t.name == name)) == want, name


def test_the_library_keeps_each_training_tasks_fastest_program_per_hardware(tmp_path):
    a, b = _task(ops.dense(16, 32, 8)), _task(ops.dense(32, 64, 16))
    unknown = _task(ops.dense(8, 8, 8))  # not a training task: never a source
    recs = _dense_records([a, b]) + _dense_records([a], hw=AVX2) + _dense_records([unknown])
    lib = SourceLibrary.from_records(recs, {a.key: a, b.key: b})
    assert len(lib) == 3 and {s.task_key for s in lib.by_type["dense"]} == {a.key, b.key}
    fastest = {(r.task_key, r.hw_key): r.trace for r in recs if r.best == 1e-3}
    for s in lib.by_type["dense"]:
        assert s.trace == fastest[(s.task_key, s.hw_key)]
        assert s.gflops == pytest.approx({a.key: a, b.key: b}[s.task_key].flops / 1e-3 / 1e9, rel=1e-3)
    lib.save(str(tmp_path / SOURCES_FILE))
    again = SourceLibrary.of_model(str(tmp_path))
    assert again.by_type == lib.by_type
    assert SourceLibrary.of_model(str(tmp_path / "none")) is None


def test_merged_libraries_keep_the_faster_program_of_a_task():
    a, b = _task(ops.dense(16, 32, 8)), _task(ops.dense(32, 64, 16))
    tasks = {a.key: a, b.key: b}
    recs = _dense_records([a, b])  # a task's fastest: 1 ms
    old = SourceLibrary.from_records(recs, tasks)
    faster = _record(a, SearchSpace(a.outputs, HW2).sample(random.Random(9))[1], 5e-4)
    new = SourceLibrary.from_records([faster] + _dense_records([b], hw=AVX2), tasks)
    both = old.merge(new)
    assert len(both) == 3
    got = {(s.task_key, s.hw_key): s.trace for s in both.by_type["dense"]}
    assert got[(a.key, HW2.key)] == faster.trace
    assert got[(b.key, HW2.key)] == next(s.trace for s in old.by_type["dense"] if s.task_key == b.key)
    assert new.merge(old).by_type.keys() == both.by_type.keys() and len(new.merge(old)) == 3


def test_a_broken_library_is_named(tmp_path):
    path = tmp_path / SOURCES_FILE
    path.write_bytes(b"not xz")
    with pytest.raises(RecordError, match=f"transfer sources {path}: unreadable"):
        SourceLibrary.load(str(path))
    with lzma.open(path, "wt") as f:
        f.write('{"task_key": "k"}\n')
    with pytest.raises(RecordError, match="unreadable"):
        SourceLibrary.load(str(path))


def test_nearest_sources_put_the_category_and_this_hardware_first():
    target = _task(ops.conv2d_bias_relu(1, 8, 12, 12, 8, 3, 3, padding=1))
    same = _task(ops.conv2d_bias_relu(1, 4, 10, 10, 8, 3, 3, padding=1))
    other_kernel = _task(ops.conv2d_bias_relu(1, 4, 10, 10, 8, 1, 1))
    other_host = HardwareParams(cores=8)
    recs = []
    for task, seconds, hw in ((same, 2e-3, HW2), (other_kernel, 1e-4, HW2), (same, 1e-4, other_host),
                              (target, 1e-5, HW2), (same, 1e-5, AVX2)):
        recs.append(_record(task, SearchSpace(task.outputs, hw).sample(random.Random(0))[1], seconds, hw))
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (target, same, other_kernel)})
    got = [(s.task_key, s.hw_key) for s in lib.nearest(target, HW2.key)]
    # its own program and the AVX2 host's are no sources; the same 3x3 kernel first, this host first
    assert got == [(same.key, HW2.key), (same.key, other_host.key), (other_kernel.key, HW2.key)]


def test_nearest_sources_of_a_category_go_by_shape_then_throughput():
    """A depthwise conv borrows from the depthwise convs of its own shape before the
    fastest ones of other shapes; within a factor of about two, the faster first."""
    target = _task(ops.depthwise_conv2d_nchw(1, 64, 14, 14, 3, 3, padding=1))
    near = _task(ops.depthwise_conv2d_nchw(1, 56, 14, 14, 3, 3, padding=1))
    nearer_slow = _task(ops.depthwise_conv2d_nchw(1, 64, 12, 14, 3, 3, padding=1))
    far_fast = _task(ops.depthwise_conv2d_nchw(1, 8, 56, 56, 3, 3, padding=1))
    assert shape_distance(shape_signature(target), shape_signature(target)) == 0.0
    assert shape_distance(shape_signature(target), shape_signature(near)) < 1.0
    assert shape_distance(shape_signature(target), shape_signature(far_fast)) > 10.0
    assert shape_distance(shape_signature(target), ()) == float("inf")
    recs = [_record(t, SearchSpace(t.outputs, HW2).sample(random.Random(0))[1], t.flops / g / 1e9)
            for t, g in ((near, 100.0), (nearer_slow, 50.0), (far_fast, 400.0))]
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (near, nearer_slow, far_fast)})
    assert [s.task_key for s in lib.nearest(target, HW2.key)] == [near.key, nearer_slow.key, far_fast.key]
    # a library written before shapes were kept: throughput alone orders it
    old = SourceLibrary(Source(**{**s.__dict__, "shape": ()}) for s in lib.by_type["depthwise_conv2d"])
    assert [s.task_key for s in old.nearest(target, HW2.key)] == [far_fast.key, near.key, nearer_slow.key]


def test_another_hosts_program_of_the_shape_goes_before_this_hosts_of_a_far_shape():
    """This host's programs lead only within a step: a LayerNorm tuned here for a shape
    thousands of times another is borrowed after one tuned elsewhere for the task's own
    shape, and one tuned here for 1.5 times the rows ties with that one and goes first."""
    target = _task(ops.layernorm(128, 768))
    same_shape = _task(ops.layernorm(128, 768, eps=1e-6))
    rows = _task(ops.layernorm(192, 768))
    far = _task(ops.layernorm(1, 96))
    assert 1.0 < shape_distance(shape_signature(target), shape_signature(rows)) < 2.0
    assert shape_distance(shape_signature(target), shape_signature(far)) > 10.0
    other_host = HardwareParams(cores=2, l2_kb=1024)
    recs = [_record(t, SearchSpace(t.outputs, hw).sample(random.Random(0))[1], 1e-4, hw)
            for t, hw in ((same_shape, other_host), (rows, HW2), (far, HW2))]
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (same_shape, rows, far)})
    assert [s.task_key for s in lib.nearest(target, HW2.key)] == [rows.key, same_shape.key, far.key]
    # without the source that ties, the other host's program of the task's shape leads
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (same_shape, far)})
    assert [s.task_key for s in lib.nearest(target, HW2.key)] == [same_shape.key, far.key]


def test_a_source_task_lends_one_program_of_this_host_and_one_of_the_others():
    target, source = _task(ops.layernorm(128, 768)), _task(ops.layernorm(128, 768, eps=1e-6))
    hosts = (HW2, HardwareParams(cores=2, l2_kb=1024), HardwareParams(cores=2, l1_kb=32, l2_kb=1024))
    recs = [_record(source, SearchSpace(source.outputs, hw).sample(random.Random(seed))[1], 1e-4, hw)
            for seed, hw in enumerate(hosts)]
    lib = SourceLibrary.from_records(recs, {source.key: source})
    assert len(lib.nearest(target, HW2.key)) == 3
    got = lib.transfers(SearchSpace(target.outputs, HW2), target, 16)
    assert len(got) == 2  # this host's and the first of the other two
    assert got[0][1].to_json() == recs[0].trace  # this host's first: the same shape, replayed as it was


def test_a_training_task_borrows_its_own_programs_from_other_hosts_only_when_asked():
    """Refreshing a library on a new host (`tlm_borrow_own`): the task's programs measured
    elsewhere lead its borrowed ones, before a neighbour of this host within a step."""
    task, near = _task(ops.layernorm(128, 768)), _task(ops.layernorm(128, 768, eps=1e-6))
    other_host = HardwareParams(cores=2, l2_kb=1024)
    recs = [_record(t, SearchSpace(t.outputs, hw).sample(random.Random(seed))[1], 1e-4, hw)
            for t, hw, seed in ((task, other_host, 0), (near, HW2, 1))]
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (task, near)})
    assert [s.task_key for s in lib.nearest(task, HW2.key)] == [near.key]
    assert [s.task_key for s in lib.nearest(task, HW2.key, own=True)] == [task.key, near.key]
    assert [s.task_key for s in lib.nearest(task, other_host.key, own=True)] == [task.key, near.key]
    space = SearchSpace(task.outputs, HW2)
    assert len(lib.transfers(space, task, 4)) == 1 and len(lib.transfers(space, task, 4, own=True)) == 2


def _tiled_dense_source(task: Task, tile: tuple) -> Record:
    """A program of `task` whose every tile question takes `tile` (or its nearest answer)."""
    from tlmir.search.transfer import TransferDecider
    space = SearchSpace(task.outputs, HW2)
    base = space.sample(random.Random(0))[1]
    forced = type(base)(base.sketch, [(q, tile if isinstance(a, tuple) and q.startswith("tile D.")
                                       and len(a) == len(tile) else a) for q, a in base.decisions])
    _, trace = space.apply(forced.sketch, TransferDecider(forced))
    return _record(task, trace, 1e-4)


def test_transfers_put_a_source_whose_inner_tiles_survive_before_a_nearer_one_whose_do_not():
    """Target extents 48: a source of extents 51 (3 x 17) has 17-wide inner tiles no
    factorization of 48 keeps; one of extents 64 keeps its (1, 2, 8). By shape the 51
    comes first; counting the deviation, the 64."""
    target = _task(ops.dense(48, 48, 48))
    prime, far = _task(ops.dense(51, 51, 51)), _task(ops.dense(64, 64, 64))
    recs = [_tiled_dense_source(prime, (3, 1, 1, 17)), _tiled_dense_source(far, (4, 1, 2, 8))]
    lib = SourceLibrary.from_records(recs, {t.key: t for t in (prime, far)})
    space = SearchSpace(target.outputs, HW2)
    assert [s.task_key for s in lib.nearest(target, HW2.key)] == [prime.key, far.key]
    plain = lib.transfers(space, target, 1)
    kept = lib.transfers(space, target, 1, deviation_steps=20.0)
    from tlmir.search.transfer import replay
    by_key = {s.task_key: s for s in lib.by_type["dense"]}
    dev = {k: replay(space, Trace.from_json(s.trace), s.sketch).deviation for k, s in by_key.items()}
    assert dev[far.key] == 0.0 < dev[prime.key]
    assert plain[0][1].to_json() == replay(space, Trace.from_json(by_key[prime.key].trace),
                                           by_key[prime.key].sketch).trace.to_json()
    assert kept[0][1].to_json() == replay(space, Trace.from_json(by_key[far.key].trace),
                                          by_key[far.key].sketch).trace.to_json()
    assert len(lib.transfers(space, target, 2, deviation_steps=3.0)) == 2
    sourced = lib.sourced_rewrites(space, target, 2, deviation_steps=20.0)
    assert [s.task_key for s, _ in sourced] == [far.key, prime.key]
    assert [r.deviation for _, r in sourced] == [0.0, dev[prime.key]]


def test_transferred_sources_compile_and_match_numpy():
    sources = [_task(ops.dense(16 * i, 32, 24, bias=True, act="gelu")) for i in (1, 2, 3)]
    op = ops.dense(40, 48, 16, bias=True, act="gelu")
    target = _task(op)
    lib = SourceLibrary.from_records(_dense_records(sources), {t.key: t for t in sources})
    space = SearchSpace(target.outputs, HW2)
    got = lib.transfers(space, target, 8)
    assert 1 <= len(got) <= 3  # one per source task
    assert len({trace.to_json() for _, trace in got}) == len(got)
    first = got[0][1].to_json()
    assert first not in {t.to_json() for _, t in lib.transfers(space, target, 8, exclude=frozenset({first}))}
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for sch, trace in got:
        assert_program_matches(sch, op, ins, want, trace)


def test_an_op_borrows_from_its_family_whatever_the_epilogue():
    """dense + bias + GELU has no source of its own type here: it borrows dense + bias
    programs, their sketches matched with the epilogue stage renamed, and they compute
    the right thing."""
    assert op_family("dense_bias_gelu") == op_family("dense") == "dense"
    assert op_family("conv2d_transpose_tanh") == "conv2d_transpose" and op_family("silu_mul") == "silu"
    form, names = epilogue_form("gelu:skip, bias:inline, D:tile_fuse1, W:packD")
    assert form == "@out:skip, D:tile_fuse1, W:packD" and names("gelu.j") == "@out.j" and names("D.i") == "D.i"
    form, names = epilogue_form("conv:cache_write2, pad:skip")  # a plain conv's local buffer
    assert form == "@out:skip, conv:tile_fuse2, pad:skip" and names("conv") == "@out"
    assert [names(n) for n in ("conv.local.c.c", "conv.local.n.c.outer.k.c.outer.fused", "conv.local.rc")] == \
        ["conv.c", "conv.n.outer.k.outer.fused", "conv.rc"]
    assert epilogue_form("D:tile") == ("D:tile", None) and op_family("conv2d_nchw") == "conv2d"
    sources = [_task(ops.dense(16 * i, 48, 24, bias=True)) for i in (1, 2, 3)]
    op = ops.dense(40, 48, 16, bias=True, act="gelu")
    target = _task(op)
    lib = SourceLibrary.from_records(_dense_records(sources), {t.key: t for t in sources})
    assert {s.task_key for s in lib.nearest(target, HW2.key)} == {t.key for t in sources}
    space = SearchSpace(target.outputs, HW2)
    got = lib.transfers(space, target, 8)
    assert len(got) == 3
    forms = {epilogue_form(s.sketch)[0] for s in lib.by_type["dense_bias"]}
    for sch, trace in got:
        assert epilogue_form(str(space.sketches[trace.sketch]))[0] in forms
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for sch, trace in got:
        assert_program_matches(sch, op, ins, want, trace)


def _dense_tanh_gelu(M: int, N: int, K: int):
    """A dense followed by a tanh GELU written by hand in `te`: an op no source is named for."""
    from tlmir import te
    from tlmir.ops.base import OpDef, count_flops
    d = ops.dense(M, N, K)
    D = d.outputs[0]

    def gelu(v, tanh):  # te expressions or float64 arrays
        return 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)))
    y = te.compute((M, N), lambda i, j: gelu(D[i, j], te.tanh), name="act")
    return OpDef("my_gelu_layer", d.inputs, [y], lambda x, w: [gelu(d.reference(x, w)[0], np.tanh)],
                 count_flops([y]), dict(M=M, N=N, K=K))


@pytest.mark.parametrize("target_op, source_ops", [
    (_dense_tanh_gelu(24, 40, 32), [ops.dense(16 * i, 40, 32, bias=True, act="gelu") for i in (1, 2)]),
    (ops.matmul(20, 40, 16), [ops.batch_matmul(2 * i, 16, 40, 16) for i in (1, 2)]),
])
def test_an_op_no_source_is_named_for_borrows_by_structure(target_op, source_ops):
    """A task whose op family has no source (named freely, as a user names an op of their
    own) borrows from sources whose sketch has the same structure, and the programs
    compute the right thing."""
    sources = [_task(op) for op in source_ops]
    target = Task.from_op(target_op, name="my_op")
    lib = SourceLibrary.from_records(_dense_records(sources, 8), {t.key: t for t in sources})
    assert lib.nearest(target, HW2.key) == []
    space = SearchSpace(target.outputs, HW2)
    assert {s.task_key for s in lib.by_structure(space, target, HW2.key)} == {t.key for t in sources}
    got = lib.transfers(space, target, 8)
    assert len(got) == len(sources)
    ins = target_op.random_inputs(0)
    want = target_op.run_reference(*ins)
    for sch, trace in got:
        assert_program_matches(sch, target_op, ins, want, trace)


@pytest.mark.parametrize("target_op, source_ops", [
    (ops.conv2d_nchw(1, 8, 10, 10, 16, 3, 3, padding=1),
     [ops.conv2d_bias_relu(1, 8, 10, 10, 8 * i, 3, 3, padding=1) for i in (1, 2, 3)]),
    (ops.dense(24, 40, 32), [ops.dense(16 * i, 40, 32, bias=True) for i in (1, 2)]),
])
def test_a_cache_write_sketch_borrows_a_fused_epilogues_program(target_op, source_ops):
    """A plain conv / dense writes its result back from a local buffer where a fused
    epilogue's sketch computes into the epilogue's loops: the same loop nest, so they
    borrow one another's programs, and the programs compute the right thing."""
    sources = [_task(op) for op in source_ops]
    target = _task(target_op)
    lib = SourceLibrary.from_records(_dense_records(sources, 8), {t.key: t for t in sources})
    space = SearchSpace(target.outputs, HW2)
    got = lib.transfers(space, target, 8)
    assert 1 <= len(got) <= len(sources)  # a source of an unfused sketch has no counterpart
    ins = target_op.random_inputs(0)
    want = target_op.run_reference(*ins)
    for sch, trace in got:
        assert_program_matches(sch, target_op, ins, want, trace)


@pytest.mark.parametrize("share, borrowed", [(0.4, 4), (0.0, 0)])
def test_tlm_measures_its_share_of_transfers_beside_its_own_programs(tmp_path, share, borrowed):
    """At share 0.4 TLM-10 measures four transfers, the evaluator's top picks of the
    library's, and six of the model's programs; a model without sources measures its own only."""
    model = tmp_path / "tlm"
    shutil.copytree(TUNED_MODEL, model, ignore=shutil.ignore_patterns(SOURCES_FILE))
    sources = [_task(ops.dense(16 * i, 64, 32)) for i in range(1, 9)]
    SourceLibrary.from_records(_dense_records(sources, 1), {t.key: t for t in sources}).save(
        str(model / SOURCES_FILE))
    task = _task(ops.dense(24, 64, 48))
    sp = SearchParams(tlm_rank_per_slot=4, tlm_rank_min_pool=0, tlm_transfer_share=share, tlm_transfers=6)
    search = make_strategy("tlm", SearchSpace(task.outputs, HW2, sp), task, seed=0, model=str(model))
    picks = search.propose(10)
    lib = SourceLibrary.of_model(str(model))
    transferred = {trace.to_json() for _, trace in lib.transfers(search.space, task, 6,
                                                                 deviation_steps=sp.tlm_transfer_deviation)}
    assert len(picks) == 10 and len({c.key for c in picks}) == 10
    assert sum(c.key in transferred for c in picks[:borrowed]) == borrowed
    if borrowed:
        assert len(search.borrowable) == 6 - borrowed
        again = search.propose(10)  # the rest of the transfers, then none
        assert sum(c.key in transferred for c in again) == 2
    bare = tmp_path / "bare"
    shutil.copytree(TUNED_MODEL, bare, ignore=shutil.ignore_patterns(SOURCES_FILE))
    assert make_strategy("tlm", SearchSpace(task.outputs, HW2, sp), task, model=str(bare)).sources is None


def test_tlm_has_the_model_rewrite_the_tiles_a_transfer_could_not_keep(tmp_path):
    """With `tlm_transfer_repairs`, each rewrite whose inner tiles moved lends programs
    that keep its other answers and have the model answer the moved tile questions."""
    model = tmp_path / "tlm"
    shutil.copytree(TUNED_MODEL, model, ignore=shutil.ignore_patterns(SOURCES_FILE))
    prime = _task(ops.dense(51, 51, 51))
    SourceLibrary.from_records([_tiled_dense_source(prime, (3, 1, 1, 17))], {prime.key: prime}).save(
        str(model / SOURCES_FILE))
    task = _task(ops.dense(48, 48, 48))
    sp = SearchParams(tlm_rank_per_slot=4, tlm_rank_min_pool=0, tlm_transfers=4, tlm_transfer_repairs=3)
    search = make_strategy("tlm", SearchSpace(task.outputs, HW2, sp), task, seed=0, model=str(model))
    lent = search._borrow(2, set()) + search.borrowable  # TLM-1's pick and the rest
    rewrite = SourceLibrary.of_model(str(model)).rewrites(search.space, task, 4)[0]
    assert rewrite.moved
    repairs = [c for c in lent if c.key != rewrite.trace.to_json()]
    assert repairs and all(search.library_rank[c.key] == 0 for c in repairs)
    kept = {q: a for q, a in rewrite.trace.decisions if q.startswith("tile ") and q not in rewrite.moved}
    for c in repairs:  # (a question asked after a moved tile may depend on it: those may differ)
        assert c.trace.sketch == rewrite.trace.sketch
        assert {q: a for q, a in c.trace.decisions if q in kept} == kept
    with pytest.raises(ScheduleError, match="tlm_transfer_repairs"):
        SearchParams(tlm_transfer_repairs=-1)


def test_search_params_refuse_a_share_outside_zero_to_one():
    from tlmir.errors import ScheduleError
    with pytest.raises(ScheduleError, match="tlm_transfer_share"):
        SearchParams(tlm_transfer_share=1.5)
    with pytest.raises(ScheduleError, match="tlm_transfer_deviation"):
        SearchParams(tlm_transfer_deviation=-1.0)


def test_measured_novel_tasks_join_the_library_when_asked(tmp_path):
    from tlmir.cli import main
    from tlmir.lm.novel_tasks import novel_tasks
    from tlmir.runtime.records import RecordDB, export_jsonl
    novel = next(t for t in novel_tasks(40, seed=3) if t.name.startswith("dense_"))
    db = RecordDB(str(tmp_path / "r.db"))
    db.append_many(_dense_records([novel]))
    export_jsonl(db, str(tmp_path / "r.jsonl.xz"))
    for extra, expected in (([], set()), (["--novel", "40", "--novel-seed", "3"], {novel.key})):
        out = str(tmp_path / f"s{len(extra)}.jsonl.xz")
        main(["train", "sources", "--records", str(tmp_path / "r.jsonl.xz"), "--out", out, *extra])
        lib = SourceLibrary.load(out)
        assert {s.task_key for g in lib.by_type.values() for s in g} == expected
        assert all(op_family(s.task_type) == "dense" for g in lib.by_type.values() for s in g)


def test_a_library_updated_onto_another_keeps_the_faster_program_of_each_task(tmp_path, capsys):
    from tlmir.cli import main
    from tlmir.runtime.records import RecordDB, export_jsonl
    tasks = {t.key: t for t in split_tasks("train")}
    a, b = [t for t in tasks.values() if t.name.startswith("dense_")][:2]
    old = SourceLibrary.from_records(_dense_records([a, b]), tasks)  # fastest 1 ms each
    (tmp_path / "model").mkdir()
    old.save(str(tmp_path / "model" / SOURCES_FILE))  # a model directory's library
    faster = _dense_records([a], per_task=1)  # a at 1 ms again, then a new 0.5 ms program of a
    faster.append(_record(a, SearchSpace(a.outputs, HW2).sample(random.Random(7))[1], 5e-4, HW2))
    db = RecordDB(str(tmp_path / "r.db"))
    db.append_many(faster)
    export_jsonl(db, str(tmp_path / "r.jsonl.xz"))
    out = str(tmp_path / "new.jsonl.xz")
    assert main(["train", "sources", "--records", str(tmp_path / "r.jsonl.xz"),
                 "--onto", str(tmp_path / "model"), "--out", out]) == 0
    got = {s.task_key: s for g in SourceLibrary.load(out).by_type.values() for s in g}
    assert set(got) == {a.key, b.key}
    assert got[a.key].gflops == pytest.approx(a.flops / 5e-4 / 1e9, rel=1e-3)
    assert got[b.key].trace == {s.task_key: s for g in old.by_type.values() for s in g}[b.key].trace
    assert main(["train", "sources", "--records", str(tmp_path / "r.jsonl.xz"), "--onto", str(tmp_path / "none"),
                 "--out", out]) == 2
    assert "--onto" in capsys.readouterr().err
