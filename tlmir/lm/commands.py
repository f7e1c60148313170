"""`tlmir sample | tokenizer build | train pretrain | generate`: the language-model workflow."""
from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np

from ..argtypes import (fraction, nonneg_float, nonneg_int, op_args, op_from_args, positive_float, positive_int,
                        probability, ratio_list, stale_rule)
from ..errors import ModelError, RecordError, TlmirError
from ..runtime.target import HardwareParams, host_hardware
from .registry import BASE_MODEL, TOKENIZER_FILE, load_model, model_dir, passive_openmp

def cmd_sample(args) -> None:
    from .sample import sample_corpus
    from ..runtime.target import parse_target
    n = sample_corpus(args.split, args.out, per_task=args.per_task, hw_per_task=args.hw_per_task,
                      shard_tasks=args.shard_tasks, workers=args.workers, seed=args.seed,
                      limit=args.limit, host=parse_target(args.target),
                      log=(lambda m: None) if args.quiet else print)
    print(f"sampled {n} new sentences into {args.out}")


def cmd_tokenizer_build(args) -> None:
    from ..runtime.target import parse_target
    from .tokenizer import build_splits_tokenizer
    tok = build_splits_tokenizer(hw=parse_target(args.target), workers=args.workers, places=args.places,
                                 extents=args.extents)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tok.save(args.out)
    print(f"tokenizer with {tok.vocab_size} words -> {args.out}")


def cmd_tokenizer_grow(args) -> None:
    from ..runtime.target import parse_target
    from .tokenizer import Tokenizer, build_splits_tokenizer
    words = (Tokenizer.load(args.words) if args.words
             else build_splits_tokenizer(hw=parse_target(args.target), workers=args.workers))
    for d in args.models:
        grown = grow_vocabulary(d, words)
        print(f"{d}: {len(grown)} words appended" + (f" ({', '.join(grown[:6])}, ...)" if grown else ""))


def grow_vocabulary(directory: str, words) -> list[str]:
    """Append the words of `words` (a Tokenizer: today's language) that the model in
    `directory` lacks to its vocabulary, each with a new embedding row at the mean of the
    others (`GPT.grow_vocab`, or `WorldModel.grow_vocab` for an evaluator); the ids of its
    words do not move, so it reads and writes everything it did. A new sketch rule brings
    new `at` options (the loops a packed copy can sit at); the shipped models learn their
    words from the demonstrations that use them. The quality prompt's word is left to SFT,
    which appends it when its demonstrations carry the prompt. Returns the words appended."""
    from ..search.world_train import grow_evaluator_vocab, is_evaluator
    from .checkpoint import extra_of, load_checkpoint, save_checkpoint
    from .language import QUALITY
    from .tokenizer import Tokenizer, word_order
    tok_path = os.path.join(directory, TOKENIZER_FILE)
    tok = Tokenizer.load(tok_path)
    new = sorted((w for w in tok.covers(words.word(i) for i in range(words.vocab_size)) if w != QUALITY),
                 key=word_order)
    if not new:
        return []
    grown = tok.extended(new)
    if is_evaluator(directory):
        grow_evaluator_vocab(directory, grown)
        return new
    model, meta = load_checkpoint(directory, expect_vocab_size=tok.vocab_size)
    save_checkpoint(model.grow_vocab(grown.vocab_size), directory, extra_of(meta))
    grown.save(tok_path)
    return new


def _split_by_task(packed, where, val_fraction: float, val_max: int):
    """(train, validation) Packed sequences: validation = whole tasks (chosen by a hash of
    the key), so it measures generalisation; at most `val_max` of them, evenly spread."""
    is_val = where < val_fraction
    val_rows = np.flatnonzero(is_val)
    if len(val_rows) > val_max:
        val_rows = val_rows[np.linspace(0, len(val_rows) - 1, val_max).astype(np.int64)]
    return packed.take(np.flatnonzero(~is_val)), packed.take(val_rows)


def cmd_train_pretrain(args) -> None:
    passive_openmp()
    from .model import PRESETS, GPTConfig
    from .sample import encode_corpus
    from .tokenizer import Tokenizer
    from .train import pretrain
    if args.config not in PRESETS:  # before minutes of encoding the corpus
        raise TlmirError(f"--config {args.config!r}: presets are {', '.join(PRESETS)}")
    if not os.path.exists(args.data):
        raise TlmirError(f"--data {args.data!r}: no such corpus directory or sentences file")
    data_dir = args.data if os.path.isdir(args.data) else os.path.dirname(os.path.abspath(args.data))
    tok_path = args.tokenizer or os.path.join(data_dir, TOKENIZER_FILE)
    tok = Tokenizer.load(tok_path)
    enc, venc = _split_by_task(*encode_corpus(args.data, tok), args.val_fraction, args.val_max)
    config = GPTConfig.preset(args.config, tok.vocab_size, block_size=args.block_size)
    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(tok_path, os.path.join(args.out, TOKENIZER_FILE))
    stats = pretrain(enc, venc, config, args.out, tok.pad_id, steps=args.steps, batch_size=args.batch_size,
                     lr=args.lr, warmup=args.warmup, time_limit=args.time_limit, eval_every=args.eval_every,
                     init_from=model_dir(args.init_from) if args.init_from else None,
                     device=args.device, threads=args.threads, bf16=args.bf16)
    print(json.dumps(stats, indent=1))


def cmd_train_sft(args) -> None:
    passive_openmp()
    from .sft import sft
    quality = None
    if args.records:
        from ..runtime.records import read_records
        from ..workloads import split_tasks
        from .quality import DEFAULT_BOUNDS, quality_config, quality_sentences, tier_counts
        quality = quality_config(args.quality_bounds or DEFAULT_BOUNDS)
        rows = quality_sentences(read_records(args.records), split_tasks("train"), host_hardware(),
                                 quality["bounds"], args.last_tier_share, args.seed)
        print(f"{len(rows)} measured programs of the training split, by quality tier "
              f"{tier_counts(rows, quality['bounds'])}")
        demos = [r["sentence"] for r in rows]
    else:
        from .sample import read_sentences
        demos = [r["sentence"] for r in read_sentences(args.data)]
    stats = sft(model_dir(args.model), demos, args.out, epochs=args.epochs, batch_size=args.batch_size,
                lr=args.lr, seed=args.seed, quality=quality, device=args.device, learn=args.learn)
    print(json.dumps(stats, indent=1))


SAMPLED_HARDWARE = ("cpu-avx512-c2-l1_48K-l2_2048K", "cpu-avx2-c2-l1_32K-l2_512K", "cpu-avx512-c2-l1_32K-l2_1024K")


def cmd_train_validity(args) -> None:
    passive_openmp()
    import random
    from ..workloads import split_tasks
    from .validity import sample_examples, validity_tune
    model, tok, meta = load_model(args.model)
    tasks = split_tasks("train")
    random.Random(args.seed).shuffle(tasks)
    hws = [HardwareParams.from_key(k) for k in args.hardware]
    tasks = tasks[:args.tasks]
    tasks += novel_split(args.novel, args.seed)
    if args.odd:
        from .novel_tasks import odd_shape_tasks
        tasks += odd_shape_tasks(args.odd, args.seed)
    examples = sample_examples(model, tok, meta, tasks, hws, args.per_task, args.scope, args.seed)
    sampled = {"tasks": args.tasks, "novel": args.novel, "odd": args.odd, "seed": args.seed,
               "per_task": args.per_task, "scope": args.scope, "hardware": list(args.hardware)}
    stats = validity_tune(model_dir(args.model), args.out, examples, steps=args.steps,
                          batch_size=args.batch_size, lr=args.lr, anchor=args.anchor, seed=args.seed,
                          sampled=sampled)
    print(json.dumps(stats, indent=1))


def cmd_train_evaluator(args) -> None:
    from ..search.features import NUM_FEATURES
    from ..search.world_train import train_from_records
    tokenizer = args.tokenizer or os.path.join(model_dir(BASE_MODEL), TOKENIZER_FILE)
    cfg = {"d_model": args.d_model, "transition": not args.no_transition,
           "n_features": 0 if args.no_features else NUM_FEATURES}
    metrics = train_from_records(args.db, args.out, tokenizer, cfg, steps=args.steps, seed=args.seed,
                                 stale=args.stale)
    print(json.dumps({"out": args.out, "held_out": metrics}, indent=1))


def novel_split(n: int, seed: int) -> list:
    """`n` tasks of no workload (tlmir.lm.novel_tasks), the same ones for a seed."""
    from .novel_tasks import novel_tasks
    return novel_tasks(n, seed)


def cmd_train_sources(args) -> None:
    from ..runtime.records import read_records
    from ..search.transfer_sources import SOURCES_FILE, SourceLibrary
    from ..workloads import split_tasks
    train = {t.key: t for t in split_tasks("train") + novel_split(args.novel, args.novel_seed)}
    lib = SourceLibrary.from_records(read_records(args.records), train)
    if args.onto:  # a library updated with new searches, without the records it was built from
        try:
            onto = (SourceLibrary.load(args.onto) if os.path.isfile(args.onto)
                    else SourceLibrary.of_model(model_dir(args.onto)))
        except ModelError:
            onto = None
        if onto is None:
            raise RecordError(f"train sources --onto {args.onto}: no transfer sources there")
        lib = onto.merge(lib)
    out = os.path.join(args.out, SOURCES_FILE) if os.path.isdir(args.out) else args.out
    lib.save(out)
    tasks = {s.task_key for group in lib.by_type.values() for s in group}
    print(f"{len(lib)} sources ({len(tasks)} tasks) -> {out}")


def cmd_iterate(args) -> None:
    passive_openmp()
    from ..workloads import split_tasks
    from ..runtime.task import task_type
    from ..runtime.target import search_params
    from .iterate import IterateConfig, Iteration, running_tasks, spread
    sp = search_params(args.search_param)
    for name in (args.model, args.start_model):  # a misspelt model fails before the split is built
        if name:
            model_dir(name)
    split = novel_split(args.novel, args.novel_seed) if args.split == "novel" else split_tasks(args.split)
    pool = [t for t in split if t.flops <= args.max_gflop * 1e9]
    tasks = spread(pool, args.tasks) if args.tasks else pool
    held = running_tasks(args.out, args.archive)
    if held:  # a resumed run keeps its tasks and gains those of op types it has none of
        by_key = {t.key: t for t in pool}
        kept = [by_key[k] for k in held if k in by_key]
        types = {task_type(t) for t in kept}
        tasks = kept + [t for t in tasks if task_type(t) not in types and t.key not in held]
    cfg = IterateConfig(rounds=args.rounds, per_task=args.per_task, batches=args.batches,
                        sft_epochs=args.sft_epochs, rank_per_slot=args.rank_per_slot,
                        explore=args.explore, sft_data=args.sft_data, seed=args.seed,
                        start_model=args.start_model or "", extra_demos=args.extra_demos or "")
    it = Iteration(args.out, args.model, tasks, cfg, archive=args.archive, sp=sp)
    if args.export_demonstrations:
        n = it.export_demonstrations(args.export_demonstrations)
        print(f"[iterate] {n} demonstrations ({len(it.extra_rows)} extra) -> {args.export_demonstrations}")
        return
    res = it.run()
    last = res["curve"][-1]
    print(f"final model {res['out']} (from {res['final_model']}); normalized latency "
          f"{last['normalized_latency']:.4f} after {last['measurements']} measurements; "
          f"curve in {os.path.join(res['out'], 'curve.png')}")


def cmd_generate(args) -> None:
    passive_openmp()
    import torch

    from ..build import reference_outputs
    from ..runtime.task import Task
    from ..schedule.space import SearchSpace
    from .generate import Generator, Sampling
    model, tok, meta = load_model(args.model)
    task = Task.from_op(op_from_args(args))
    hw = host_hardware()
    gen = Generator.for_model(model, tok, meta, hw, Sampling(args.temperature, args.top_k, args.top_p),
                              seed=args.seed)
    space = SearchSpace(task.outputs, hw)
    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.perf_counter()
    if args.unconstrained == "sentences":
        res = gen.unconstrained(task, args.n, args.batch)
    else:
        res = gen.generate(task, args.n, args.batch, space, masked=args.unconstrained is None)
    seconds = time.perf_counter() - t0
    counts = {"generated": len(res), "well_formed": 0, "valid": 0, "verified": 0}
    ins = task.random_inputs(0)
    want = reference_outputs(task, ins)
    for g in res:
        if g.trace is None:
            continue
        counts["well_formed"] += 1
        try:
            sch = g.schedule or space.replay(g.trace)
        except TlmirError:
            continue
        counts["valid"] += 1
        if _verified(sch, task, ins, want):
            counts["verified"] += 1
    counts["programs_per_second"] = len(res) / seconds
    if args.json:
        print(json.dumps({**counts, "programs": [{"sentence": g.sentence, "error": g.error,
                                                  "trace": g.trace.to_dict() if g.trace else None}
                                                 for g in res]}))
        return
    for g in res[: args.show]:
        print(g.sentence or g.error)
    print(", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in counts.items()))


def _verified(sch, task, ins, want) -> bool:
    from ..build import build
    from ..runtime.measure import check_outputs
    try:
        outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
        build(sch, task.args)(*ins, *outs)
    except TlmirError:
        return False
    return check_outputs(outs, want, rtol=1e-3, atol=1e-3) is None


def add_parsers(sub) -> None:
    """Register the LM subcommands on the main parser's subparsers."""
    sa = sub.add_parser("sample", help="the pre-training corpus: random tensor sentences of a "
                                       "workload split, in shards (paper Alg. 1); resumable")
    sa.add_argument("--split", default="train", choices=("train", "held-out", "novel"),
                    help="whose tasks (novel: tlmir.lm.novel_tasks' tasks of no workload)")
    sa.add_argument("--per-task", type=positive_int, default=600, help="distinct sentences per task")
    sa.add_argument("--hw-per-task", type=positive_int, default=8,
                    help="hardware prompts per task: the host's, then other CPU classes")
    sa.add_argument("--shard-tasks", type=positive_int, default=16, help="tasks per shard file")
    sa.add_argument("--out", required=True, help="corpus directory")
    sa.add_argument("--workers", type=nonneg_int, default=0, help="processes (0: all cores)")
    sa.add_argument("--seed", type=nonneg_int, default=0, help="random seed of the sampler")
    sa.add_argument("--limit", type=positive_int, help="only the first N tasks")
    sa.add_argument("--quiet", action="store_true", help="no progress lines")
    sa.add_argument("--target", default="cpu",
                    help="the hardware drawn first: cpu (this host, then other CPU classes) or a GPU, "
                         "cuda:sm_70|80|86|90 (then the other GPU classes)")
    sa.set_defaults(fn=cmd_sample)
    tk = sub.add_parser("tokenizer", help="build the word-level tokenizer")
    tks = tk.add_subparsers(dest="what", required=True)
    tb = tks.add_parser("build", help="the vocabulary of the schedule spaces of both splits, "
                                      "on every CPU class (or, with --target cuda:sm_XX, every GPU class)")
    tb.add_argument("--out", required=True, help="tokenizer.json to write")
    tb.add_argument("--workers", type=nonneg_int, default=0, help="processes (default: all cores)")
    tb.add_argument("--target", default="cpu",
                    help="cpu (the shipped models' language) or cuda:sm_XX: the GPU spaces' language, "
                         "a vocabulary of its own")
    tb.add_argument("--places", action="store_true",
                    help="names by place (tlmir.lm.place_names): in0 s1 i0 r0 for every operator's "
                         "tensors, stages and axes, n0 for its extents above 1024")
    tb.add_argument("--extents", action="store_true",
                    help="with --places: a tile question's extent that is the prompt's extent of its axis "
                         "reads `ext` (nothing to copy from the prompt)")
    tb.set_defaults(fn=cmd_tokenizer_build)
    tg = tks.add_parser("grow", help="append the words of today's space a model's vocabulary lacks "
                                     "(new embedding rows; every old word keeps its id)")
    tg.add_argument("models", nargs="+", help="model directories (a TLM or an evaluator)")
    tg.add_argument("--words", help="a tokenizer.json of today's language (from `tokenizer build`); "
                                    "default: walk the spaces now")
    tg.add_argument("--workers", type=nonneg_int, default=0, help="processes (default: all cores)")
    tg.add_argument("--target", default="cpu", help="as for build")
    tg.set_defaults(fn=cmd_tokenizer_grow)
    tr = sub.add_parser("train", help="train the tensor language model")
    trs = tr.add_subparsers(dest="what", required=True)
    pt = trs.add_parser("pretrain", help="next-token pre-training on a sampled corpus; resumable")
    pt.add_argument("--data", required=True, help="corpus directory (`tlmir sample`) or sentences .jsonl")
    pt.add_argument("--tokenizer", help="tokenizer.json (default: beside the data)")
    pt.add_argument("--config", default="tiny", help="model size preset (lm/model.py PRESETS)")
    pt.add_argument("--out", required=True, help="run directory: checkpoints, then the model")
    pt.add_argument("--steps", type=positive_int, default=4000, help="optimizer steps")
    pt.add_argument("--batch-size", type=positive_int, default=32, help="sequences per step")
    pt.add_argument("--lr", type=positive_float, default=1e-3, help="peak learning rate (cosine decay)")
    pt.add_argument("--warmup", type=nonneg_int, default=100, help="linear warm-up steps")
    pt.add_argument("--block-size", type=positive_int, default=1024, help="tokens per sequence")
    pt.add_argument("--eval-every", type=positive_int, default=200, help="validation (and checkpoint) interval in steps")
    pt.add_argument("--val-fraction", type=fraction, default=0.03, help="share of the tasks held out for validation")
    pt.add_argument("--val-max", type=positive_int, default=2048, help="validation sentences at most")
    pt.add_argument("--threads", type=positive_int, help="torch threads (default: all cores)")
    pt.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to train")
    pt.add_argument("--bf16", action="store_true", help="bfloat16 autocast (float32 weights)")
    pt.add_argument("--time-limit", type=positive_float, help="stop (resumably) after this many seconds")
    pt.add_argument("--init-from", help="start a new run from this model's weights (e.g. base)")
    pt.set_defaults(fn=cmd_train_pretrain)
    st = trs.add_parser("sft", help="fine-tune a copy of a model on demonstration sentences")
    data = st.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="demonstrations, .jsonl like `tlmir sample` writes")
    data.add_argument("--records", nargs="+", help="quality-conditioned: every program measured in these "
                      "records (.db, .jsonl, .jsonl.xz; training split only), with its quality prompt")
    st.add_argument("--quality-bounds", type=ratio_list,
                    help="--records: latency / task best bounding quality tiers 0, 1, ... (default 1.1,1.5,3)")
    st.add_argument("--last-tier-share", type=probability, default=1.0,
                    help="--records: share of the slowest tier kept (drawn at random)")
    st.add_argument("--model", default="base", help="the model copied and fine-tuned: base, tlm or a directory")
    st.add_argument("--out", required=True, help="directory of the fine-tuned model")
    st.add_argument("--epochs", type=positive_float, default=8.0, help="passes over the demonstrations")
    st.add_argument("--batch-size", type=positive_int, default=16, help="demonstrations per step")
    st.add_argument("--lr", type=positive_float, default=5e-4, help="learning rate")
    st.add_argument("--seed", type=nonneg_int, default=0, help="random seed of the batch order")
    st.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to train")
    st.add_argument("--learn", default="answers", choices=("answers", "sentences"),
                    help="tokens scored: the answers only, or every decision word (questions too: "
                    "the model keeps the grammar, TLM-10 about 4%% lower)")
    st.set_defaults(fn=cmd_train_sft)
    va = trs.add_parser("validity", help="teach a model the answers the space allows: the loss on its "
                        "mass outside the mask, on its own samples of training tasks (tlmir.lm.validity)")
    va.add_argument("--model", default="tlm", help="the model tuned: tlm, base or a directory")
    va.add_argument("--out", required=True, help="directory of the tuned model")
    va.add_argument("--tasks", type=positive_int, default=600, help="training tasks sampled")
    va.add_argument("--novel", type=nonneg_int, default=600, help="tasks of no workload drawn at random "
                    "(tlmir.lm.novel_tasks) sampled beside the training tasks, so the KL anchor holds "
                    "the model where no training prompt is")
    va.add_argument("--odd", type=nonneg_int, default=0, help="tasks of no workload at any integer extents "
                    "(tlmir.lm.novel_tasks.odd_shape_tasks): the model learns to copy every number a "
                    "prompt may hold into the questions (with --scope sentences)")
    va.add_argument("--per-task", type=positive_int, default=8, help="samples per task and hardware")
    va.add_argument("--hardware", nargs="+", default=list(SAMPLED_HARDWARE), help="hardware keys sampled on")
    va.add_argument("--scope", default="answers", choices=("answers", "sentences"),
                    help="scored words: the answers, or every decision word (the grammar too)")
    va.add_argument("--steps", type=positive_int, default=1500, help="optimizer steps")
    va.add_argument("--batch-size", type=positive_int, default=16, help="samples per step")
    va.add_argument("--lr", type=positive_float, default=5e-4, help="peak learning rate")
    va.add_argument("--anchor", type=nonneg_float, default=1.0, help="weight of the KL to the model as it "
                    "was over the allowed words (what masked sampling draws)")
    va.add_argument("--seed", type=nonneg_int, default=0, help="random seed")
    va.set_defaults(fn=cmd_train_validity)
    ev = trs.add_parser("evaluator", help="the world-model evaluator, on measured records of the training "
                        "split (the held-out split's are scored, never trained on)")
    ev.add_argument("--db", nargs="+", required=True, help="records: .db, .jsonl or .jsonl.xz")
    ev.add_argument("--out", required=True, help="directory of the trained evaluator")
    ev.add_argument("--tokenizer", help="tokenizer.json (default: the base model's)")
    ev.add_argument("--steps", type=positive_int, default=2000, help="optimizer steps")
    ev.add_argument("--d-model", type=positive_int, default=96, help="width of the latent state")
    ev.add_argument("--no-transition", action="store_true", help="the static ablation: no latent dynamics")
    ev.add_argument("--no-features", action="store_true",
                    help="the head reads the decisions only, not the lowered program's features")
    ev.add_argument("--seed", type=nonneg_int, default=0, help="random seed")
    ev.add_argument("--stale", type=stale_rule, action="append", default=[], metavar="REGEX@TIME",
                    help="leave out records of tasks whose name matches REGEX measured before TIME where "
                         "the task was measured again since: a code generator change re-ranked their "
                         "programs (repeatable)")
    ev.set_defaults(fn=cmd_train_evaluator)
    so = trs.add_parser("sources", help="the transfer sources a model ships: each training task's fastest "
                        "program per hardware, which tlm rewrites for a new task's shape")
    so.add_argument("--records", nargs="+", required=True, help="records: .db, .jsonl or .jsonl.xz "
                    "(held-out tasks' records are ignored)")
    so.add_argument("--out", required=True, help="a model directory or a .jsonl.xz file")
    so.add_argument("--onto", help="start from this library (tlm, a model directory or a sources .jsonl.xz) "
                    "and keep the faster program where it and the records both hold a task on a hardware")
    so.add_argument("--novel", type=nonneg_int, default=0, help="also the programs of this many tasks of "
                    "no workload (those `tlmir iterate --split novel` measures)")
    so.add_argument("--novel-seed", type=nonneg_int, default=0, help="which novel tasks (tlmir.lm.novel_tasks)")
    so.set_defaults(fn=cmd_train_sources)
    it = sub.add_parser("iterate", help="iterative optimization: generate, measure, fine-tune (paper §5.3)")
    it.add_argument("--split", default="train", choices=("train", "held-out", "novel"),
                    help="whose tasks (novel: --novel tasks of no workload, tlmir.lm.novel_tasks)")
    it.add_argument("--novel", type=positive_int, default=600, help="--split novel: how many tasks are drawn")
    it.add_argument("--novel-seed", type=nonneg_int, default=0, help="--split novel: which tasks")
    it.add_argument("--rounds", type=positive_int, default=8, help="rounds of generate, measure, fine-tune")
    it.add_argument("--model", default="base", help="the base model each round fine-tunes afresh")
    it.add_argument("--out", required=True, help="run directory; the final model lands here")
    it.add_argument("--per-task", type=positive_int, default=8, help="programs measured per task and round")
    it.add_argument("--batches", type=positive_int, default=4, help="the tasks are measured in this many batches")
    it.add_argument("--max-gflop", type=positive_float, default=1.0, help="leave out tasks larger than this")
    it.add_argument("--tasks", type=positive_int, help="only N tasks, spread evenly over the op types and sizes")
    it.add_argument("--archive", help="directory in the repository that keeps the measurements "
                                      "(records.jsonl.xz) and progress after every round; a new "
                                      "machine's run resumes from it")
    it.add_argument("--start-model", help="the model that writes the rounds before the first fine-tuning "
                    "(default: --model), e.g. tlm on a CPU class it has no demonstrations of")
    it.add_argument("--extra-demos", help="demonstrations (.jsonl) every fine-tuning learns besides the "
                    "run's, e.g. tlmir/lm/models/tlm/demonstrations.jsonl (another CPU class's)")
    it.add_argument("--export-demonstrations", metavar="FILE",
                    help="measure nothing: write what the next fine-tuning would learn (--extra-demos' "
                         "rows, then the run's best programs) for `tlmir train sft --data`, and stop")
    it.add_argument("--sft-epochs", type=positive_float, default=8.0, help="fine-tuning passes per round")
    it.add_argument("--sft-data", choices=("best", "quality"), default="best",
                    help="fine-tune on the best programs (demonstrations) or on every measured program "
                         "with its quality tier in the prompt")
    it.add_argument("--rank-per-slot", type=positive_int, default=4,
                    help="programs the model writes per program measured; the world-model evaluator "
                         "picks which are measured (1: measured as written)")
    it.add_argument("--explore", type=nonneg_int, default=4,
                    help="ranked: of each task's programs measured, this many are drawn at random "
                         "from the written rest instead of picked by the evaluator")
    it.add_argument("--seed", type=nonneg_int, default=0, help="random seed of the sampling")
    it.add_argument("--search-param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a SearchParams field, e.g. world_evaluator=DIR (repeatable)")
    it.set_defaults(fn=cmd_iterate)
    ge = sub.add_parser("generate", help="generate schedules for an op with a TLM (paper Alg. 2)")
    ge.add_argument("--model", default="default",
                    help="default (the shipped, fine-tuned tlm), base (pre-trained only; the one to sample "
                         "--unconstrained) or a model directory")
    op_args(ge)
    ge.add_argument("-n", type=positive_int, default=8, help="programs to generate")
    ge.add_argument("--batch", type=positive_int, default=64, help="sentences decoded together")
    ge.add_argument("--temperature", type=nonneg_float, default=1.0, help="sampling temperature (0: greedy)")
    ge.add_argument("--top-k", type=nonneg_int, default=0, help="sample from the k likeliest answers (0: all)")
    ge.add_argument("--top-p", type=probability, default=1.0, help="nucleus sampling mass")
    ge.add_argument("--seed", type=nonneg_int, default=0, help="random seed of the sampling")
    ge.add_argument("--unconstrained", nargs="?", const="sentences", choices=("sentences", "answers"),
                    help="sample the raw model, no mask: the whole sentence (the default), or "
                         "`answers` to the questions the space asks")
    ge.add_argument("--show", type=nonneg_int, default=3, help="print this many sentences")
    ge.add_argument("--json", action="store_true", help="print counts and the programs as one JSON object")
    ge.set_defaults(fn=cmd_generate)
