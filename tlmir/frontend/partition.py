"""Fusion: the ATen graph cut into tlmir subgraphs, as TVM's Relay fusion cuts a model.

An anchor op (conv, linear, addmm, matmul, softmax, layer_norm, pooling) takes the
epilogue its tlmir op can compute (a folded BatchNorm, a bias, ReLU / ReLU6 / GELU / tanh,
attention's scale and mask after a batch matmul; after a dense, the whole element-wise
region up to its single exit, a te task); other chains of element-wise ops become one
fused stage. Each subgraph maps to a `tlmir.ops` definition
(or a `te` one for element-wise chains) and becomes a task of a `Net`, so identical
subgraphs share one task. Views and copies run in PyTorch ("layout"), as does any op
without a mapping ("fallback"), which the report names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.fx as fx

from .. import ops, te
from ..ops.base import OpDef
from ..runtime.task import Task
from ..workloads.common import Net, _shape
from .attention import keeps_every_row, safe_softmax
from .capture import Graph, op_name
from .elementwise import broadcast_read, chain_expr, is_elementwise
from .epilogue import dense_epilogue_task, epilogue_region

LAYOUT_OPS = {
    "view", "reshape", "_unsafe_view", "flatten", "unflatten", "permute", "transpose", "t",
    "expand", "unsqueeze", "squeeze", "slice", "select", "contiguous", "clone", "alias",
    "detach", "cat", "stack", "split", "split_with_sizes", "chunk", "unbind", "narrow",
    "getitem", "dropout", "_to_copy", "to", "lift_fresh_copy", "repeat",
}
BN = "_native_batch_norm_legit_no_training"


@dataclass
class Operand:
    """A kernel input: a graph value viewed as `shape`, or a constant prepared at import."""
    shape: tuple
    node: fx.Node | None = None
    const: torch.Tensor | None = None


@dataclass
class Subgraph:
    """ATen `nodes` computed by one kernel of `task`; its output is `output`'s value."""
    task: Task
    nodes: list[fx.Node]
    operands: list[Operand]
    output: fx.Node

    @property
    def label(self) -> str:
        return self.task.name


@dataclass
class TorchStep:
    """One ATen node run by PyTorch: `kind` is "layout" (views, copies) or "fallback"."""
    node: fx.Node
    kind: str

    @property
    def label(self) -> str:
        return f"{self.kind}:{op_name(self.node)}"


@dataclass
class Partition:
    steps: list = field(default_factory=list)    # Subgraph | TorchStep, in execution order
    net: Net = field(default_factory=Net)

    @property
    def subgraphs(self) -> list[Subgraph]:
        return [s for s in self.steps if isinstance(s, Subgraph)]

    @property
    def fallbacks(self) -> list[TorchStep]:
        return [s for s in self.steps if isinstance(s, TorchStep) and s.kind == "fallback"]

    def fallback_ops(self) -> dict[str, int]:
        """ATen ops PyTorch runs because tlmir has no mapping for them, with counts."""
        out: dict[str, int] = {}
        for s in self.fallbacks:
            name = op_name(s.node)
            out[name] = out.get(name, 0) + 1
        return out


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return int(v), int(v)


def _hw(p: tuple[int, int]):
    return p[0] if p[0] == p[1] else p


def _arg(node: fx.Node, i: int, name: str, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


class _Cutter:
    def __init__(self, g: Graph):
        self.g = g
        self.taken: set[fx.Node] = set()
        self.groups: list[tuple[int, object]] = []    # (position of its last node, step)
        self.order = {n: i for i, n in enumerate(g.nodes)}
        self.net = Net()

    # ---------------------------------------------------------------- helpers

    def const(self, a) -> torch.Tensor | None:
        return self.g.constants.get(a) if isinstance(a, fx.Node) else None

    def shape(self, n: fx.Node) -> tuple:
        return self.g.shape(n)

    def only_user(self, n: fx.Node, names) -> fx.Node | None:
        """n's single user, if it is an op of `names`, untaken, and n is no graph output."""
        users = list(n.users)
        if len(users) != 1 or self.g.is_output(n):
            return None
        u = users[0]
        return u if op_name(u) in names and u not in self.taken else None

    def batchnorm_after(self, n: fx.Node):
        """(bn, getitem, scale, shift) if n feeds only an eval BatchNorm with constants."""
        bn = self.only_user(n, {BN})
        if bn is None or bn.args[0] is not n:
            return None
        item = self.only_user(bn, {"getitem"})
        if item is None or item.args[1] != 0:
            return None
        return (bn, item) + self.bn_affine(bn)

    def bn_affine(self, bn: fx.Node):
        w, b, mean, var = (self.const(a) if a is not None else None for a in bn.args[1:5])
        if mean is None or var is None:
            return None, None
        eps = float(bn.args[6])
        scale = torch.rsqrt(var.double() + eps)
        if w is not None:
            scale = scale * w.double()
        shift = -mean.double() * scale
        if b is not None:
            shift = shift + b.double()
        return scale, shift

    def emit(self, op: OpDef, nodes: list, operands: list[Operand], output: fx.Node) -> None:
        task = self.net.op(op)
        self.take(nodes, Subgraph(task, nodes, operands, output))

    def take(self, nodes: list, step) -> None:
        self.taken.update(nodes)
        self.groups.append((max(self.order[n] for n in nodes), step))

    # ---------------------------------------------------------------- anchors

    def conv(self, n: fx.Node) -> bool:
        name = op_name(n)
        if name == "convolution":
            x, w, b, stride, pad, dil, transposed, out_pad, groups = n.args[:9]
        elif name == "conv2d":
            x, w = n.args[:2]
            b, stride, pad, dil, groups = (_arg(n, i, k, d) for i, k, d in (
                (2, "bias", None), (3, "stride", 1), (4, "padding", 0), (5, "dilation", 1),
                (6, "groups", 1)))
            transposed, out_pad = False, 0
        elif name == "conv_transpose2d":
            x, w = n.args[:2]
            b, stride, pad, out_pad, groups, dil = (_arg(n, i, k, d) for i, k, d in (
                (2, "bias", None), (3, "stride", 1), (4, "padding", 0),
                (5, "output_padding", 0), (6, "groups", 1), (7, "dilation", 1)))
            transposed = True
        else:
            return False
        weight, bias = self.const(w), self.const(b)
        if (weight is None or (b is not None and bias is None) or isinstance(pad, str)
                or len(self.shape(x)) != 4 or weight.dim() != 4):
            return False
        N, C, H, W = self.shape(x)
        stride, pad, dil, out_pad = _pair(stride), _pair(pad), _pair(dil), _pair(out_pad)
        groups = int(groups)
        nodes, tail = [n], n
        weight = weight.float()
        bias = bias.double() if bias is not None else None
        bn = self.batchnorm_after(n)
        if bn is not None and bn[2] is not None:
            _, item, scale, shift = bn
            nodes += list(bn[:2])
            tail = item
            scale4 = scale[None, :, None, None] if transposed else scale[:, None, None, None]
            weight = (weight.double() * scale4).float()
            bias = shift if bias is None else bias * scale + shift
        acts = {"relu", "relu6", "hardtanh"} if not transposed else {"relu", "tanh"}
        act_node = self.only_user(tail, acts)
        act = None
        if act_node is not None:
            act = op_name(act_node)
            if act == "hardtanh":
                lo, hi = (_arg(act_node, 1, "min_val", -1.0), _arg(act_node, 2, "max_val", 1.0))
                act = "relu6" if (lo, hi) == (0.0, 6.0) else None
            if act is not None:
                nodes.append(act_node)
                tail = act_node
        K = self.shape(n)[1]
        operands = [Operand((N, C, H, W), node=x), Operand(tuple(weight.shape), const=weight)]
        if bias is not None or act is not None and not transposed:
            b32 = (bias if bias is not None else torch.zeros(K, dtype=torch.float64)).float()
            operands.append(Operand((K,), const=b32.contiguous()))
        R, S = weight.shape[2:]
        if transposed:
            if groups != 1 or dil != (1, 1):
                return False
            op = ops.conv2d_transpose_nchw(N, C, H, W, K, R, S, _hw(stride), _hw(pad), _hw(out_pad),
                                           bias=bias is not None, act=act)
        elif groups == C == K and weight.shape[1] == 1:
            operands[1] = Operand((C, 1, R, S), const=weight)
            op = ops.depthwise_conv2d_nchw(N, C, H, W, R, S, _hw(stride), _hw(pad), _hw(dil),
                                           bias=len(operands) == 3, act=act)
        else:
            kw = dict(stride=_hw(stride), padding=_hw(pad), dilation=_hw(dil), groups=groups)
            if act == "relu":
                op = ops.conv2d_bias_relu(N, C, H, W, K, R, S, **kw)
            elif len(operands) == 3:
                op = ops.conv2d_bias(N, C, H, W, K, R, S, act=act, **kw)
            else:
                op = ops.conv2d_nchw(N, C, H, W, K, R, S, **kw)
        if tuple(op.outputs[0].shape) != self.shape(n):
            return False
        self.emit(op, nodes, operands, tail)
        return True

    def linear(self, n: fx.Node) -> bool:
        x, w = n.args[:2]
        b = _arg(n, 2, "bias")
        weight, bias = self.const(w), self.const(b)
        if weight is None or weight.dim() != 2 or (b is not None and bias is None):
            return False
        N, K = weight.shape
        M = math.prod(self.shape(x)[:-1])
        nodes, act = [n], None
        u = self.only_user(n, {"relu", "gelu"})
        if u is not None and u.kwargs.get("approximate", "none") == "none":
            nodes.append(u)
            act = op_name(u)
        operands = [Operand((M, K), node=x), Operand((N, K), const=weight.float().contiguous())]
        if bias is not None:
            operands.append(Operand((N,), const=bias.float().contiguous()))
        if act is None and self.dense_epilogue(n, M, N, K, bias is not None, operands):
            return True
        self.emit(ops.dense(M, N, K, bias=bias is not None, act=act), nodes, operands, nodes[-1])
        return True

    def addmm(self, n: fx.Node) -> bool:
        """beta * b + alpha * (x @ W) with W [K, N] a constant (transformers' Conv1D, as in
        GPT-2): a dense whose weight, W transposed to nn.Linear's [N, K], and bias are
        prepared once here, alpha and beta folded into them."""
        b, x, w = n.args[:3]
        alpha, beta = float(n.kwargs.get("alpha", 1)), float(n.kwargs.get("beta", 1))
        weight, bias = self.const(w), self.const(b)
        (M, K), N = self.shape(x), self.shape(n)[1]
        if weight is None or bias is None or bias.numel() != N or bias.shape[-1:] != (N,):
            return False              # a graph-valued weight, or a bias of every row: PyTorch
        w_nk = (weight.double().t() * alpha).float().contiguous()
        nodes, act = [n], None
        u = self.only_user(n, {"relu", "gelu"})
        if u is not None and u.kwargs.get("approximate", "none") == "none":
            nodes.append(u)
            act = op_name(u)
        operands = [Operand((M, K), node=x), Operand((N, K), const=w_nk)]
        if beta != 0:
            operands.append(Operand((N,), const=(bias.double().reshape(N) * beta).float().contiguous()))
        if act is None and self.dense_epilogue(n, M, N, K, beta != 0, operands):
            return True
        self.emit(ops.dense(M, N, K, bias=beta != 0, act=act), nodes, operands, nodes[-1])
        return True

    def dense_epilogue(self, n: fx.Node, M: int, N: int, K: int, bias: bool, operands: list[Operand]) -> bool:
        """dense (+ bias) with the element-wise region after n in its kernel (epilogue.py)."""
        region = epilogue_region(self.g, n, self.order, self.taken)
        if not region:
            return False
        task, extra = dense_epilogue_task(self.g, n, region, M, N, K, bias)
        operands += [Operand(shape, const=c) if c is not None else Operand(shape, node=a) for a, shape, c in extra]
        self.take([n, *region], Subgraph(self.net.task(task), [n, *region], operands, region[-1]))
        return True

    def matmul(self, n: fx.Node) -> bool:
        a, b = n.args[:2]
        sa, sb = self.shape(a), self.shape(b)
        if len(sa) < 2 or len(sb) < 2:
            return False
        M, K, N = sa[-2], sa[-1], sb[-1]
        weight = self.const(b)
        if weight is not None and len(sb) == 2:          # x @ W: a dense with W transposed once
            rows = math.prod(sa[:-1])
            w = weight.float().t().contiguous()
            self.emit(ops.dense(rows, N, K), [n],
                      [Operand((rows, K), node=a), Operand((N, K), const=w)], n)
            return True
        if len(sa) == len(sb) == 2:
            self.emit(ops.matmul(M, N, K), [n], [Operand(sa, node=a), Operand(sb, node=b)], n)
            return True
        if sa[:-2] != sb[:-2]:
            return False                                  # broadcast batches: PyTorch runs it
        B = math.prod(sa[:-2])
        nodes, operands = [n], [Operand((B, M, K), node=a), Operand((B, K, N), node=b)]
        scale, mask = self.scores_epilogue(n, nodes, operands)
        self.emit(ops.batch_matmul(B, M, N, K, scale, mask), nodes, operands, nodes[-1])
        return True

    def scores_epilogue(self, n: fx.Node, nodes: list, operands: list) -> tuple[float | None, int | None]:
        """Attention's `* scale` (or `/ d`) and `+ mask` after a batch matmul, appended to
        `nodes` and `operands`: (scale, number of masks) for `ops.batch_matmul`."""
        scale, mask, tail = None, None, n
        u = self.only_user(n, {"mul", "div"})
        if (u is not None and u.args[0] is n and len(u.args) == 2 and _number(u.args[1])
                and (op_name(u) == "mul" or u.args[1] != 0)):
            scale = float(u.args[1]) if op_name(u) == "mul" else 1.0 / float(u.args[1])
            nodes.append(u)
            tail = u
        u = self.only_user(tail, {"add"})
        if (u is not None and len(u.args) == 2 and u.kwargs.get("alpha", 1) == 1
                and self.shape(u) == self.shape(n)):
            other = u.args[1] if u.args[0] is tail else u.args[0]
            m = (self.mask_operand(other, self.shape(n))
                 if isinstance(other, fx.Node) and other not in nodes else None)
            if m is not None:
                mask = m.shape[0]
                nodes.append(u)
                operands.append(m)
        return scale, mask

    def mask_operand(self, m: fx.Node, out: tuple) -> Operand | None:
        """`m` as a G x M x N operand of a batch matmul's `out` (..., M, N) scores, batch b
        reading mask b // (B // G): its leading axes some of `out`'s then ones. A constant
        is broadcast to that here; a graph value must have that shape already."""
        val = m.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or val.dim() > len(out):
            return None
        shape = (1,) * (len(out) - val.dim()) + tuple(int(s) for s in val.shape)
        lead = len(out) - 2
        while lead > 0 and shape[lead - 1] == 1:
            lead -= 1
        G, want = math.prod(out[:lead]), out[:lead] + (1,) * (len(out) - 2 - lead) + out[-2:]
        c = self.const(m)
        if c is not None:
            full = torch.broadcast_to(c.reshape(shape), want)
            return Operand((G,) + out[-2:], const=full.float().reshape((G,) + out[-2:]).contiguous())
        return Operand((G,) + out[-2:], node=m) if shape == want else None

    def softmax(self, n: fx.Node) -> bool:
        """softmax, or SDPA's `_safe_softmax` (rows all -inf give 0): the plain op where
        the graph shows no row can be all -inf, else `attention.safe_softmax`."""
        x, dim = n.args[:2]
        s = self.shape(x)
        if int(dim) not in (-1, len(s) - 1) or x.meta["val"].dtype != torch.float32:
            return False
        M = math.prod(s[:-1])
        operands = [Operand((M, s[-1]), node=x)]
        if op_name(n) == "_safe_softmax" and not keeps_every_row(x, self.g.constants):
            task = self.net.task(safe_softmax(M, s[-1]))
            self.take([n], Subgraph(task, [n], operands, n))
        else:
            self.emit(ops.softmax(M, s[-1]), [n], operands, n)
        return True

    def norm(self, n: fx.Node) -> bool:
        x, shape = n.args[:2]
        s = self.shape(x)
        if len(shape) != 1 or shape[0] != s[-1]:
            return False
        N, M = s[-1], math.prod(s[:-1])
        if op_name(n) == "layer_norm":
            w, b = _arg(n, 2, "weight"), _arg(n, 3, "bias")
            eps = float(_arg(n, 4, "eps", 1e-5))
            gamma = self.const(w) if w is not None else torch.ones(N)
            beta = self.const(b) if b is not None else torch.zeros(N)
            if gamma is None or beta is None:
                return False
            self.emit(ops.layernorm(M, N, eps), [n], [
                Operand((M, N), node=x), Operand((N,), const=gamma.float().contiguous()),
                Operand((N,), const=beta.float().contiguous())], n)
            return True
        w, eps = _arg(n, 2, "weight"), _arg(n, 3, "eps")
        gamma = self.const(w) if w is not None else torch.ones(N)
        if gamma is None or eps is None:
            return False
        self.emit(ops.rmsnorm(M, N, float(eps)), [n], [
            Operand((M, N), node=x), Operand((N,), const=gamma.float().contiguous())], n)
        return True

    def pool(self, n: fx.Node) -> bool:
        name = op_name(n)
        x = n.args[0]
        s = self.shape(x)
        if len(s) != 4:
            return self.row_reduce(n)
        N, C, H, W = s
        nodes, out = [n], n
        if name in ("max_pool2d", "max_pool2d_with_indices"):
            k = _pair(_arg(n, 1, "kernel_size"))
            st = _pair(_arg(n, 2, "stride", []) or k)
            pad, dil = _pair(_arg(n, 3, "padding", 0)), _pair(_arg(n, 4, "dilation", 1))
            if dil != (1, 1):
                return False
            if name == "max_pool2d_with_indices":
                item = [u for u in n.users if op_name(u) == "getitem"]
                if len(n.users) != 1 or not item or item[0].args[1] != 0:
                    return False
                nodes.append(item[0])
                out = item[0]
            op = ops.max_pool2d(N, C, H, W, _hw(k), _hw(st), _hw(pad))
        elif name == "avg_pool2d":
            k = _pair(_arg(n, 1, "kernel_size"))
            st = _pair(_arg(n, 2, "stride", []) or k)
            pad = _pair(_arg(n, 3, "padding", 0))
            if (not _arg(n, 5, "count_include_pad", True) and pad != (0, 0)) \
                    or _arg(n, 6, "divisor_override") is not None:
                return False
            op = ops.avg_pool2d(N, C, H, W, _hw(k), _hw(st), _hw(pad))
        elif name in ("adaptive_avg_pool2d", "mean"):
            if name == "mean":
                dims = _arg(n, 1, "dim")
                if (not isinstance(dims, (list, tuple)) or {int(d) % 4 for d in dims} != {2, 3}
                        or n.kwargs.get("dtype") is not None):
                    return self.row_reduce(n)
                oh = ow = 1
            else:
                oh, ow = _pair(n.args[1])
            if H % oh or W % ow:
                return False
            k = (H // oh, W // ow)
            op = ops.avg_pool2d(N, C, H, W, _hw(k), _hw(k), 0)
        else:
            return False
        if math.prod(op.outputs[0].shape) != math.prod(self.shape(out)):
            return False      # ceil_mode and other shapes PyTorch computes differently
        self.emit(op, nodes, [Operand(s, node=x)], out)
        return True

    def row_reduce(self, n: fx.Node) -> bool:
        """sum / mean over the last axis (RMSNorm's mean of squares, a pooled token) as
        one te reduction: rows x N -> rows."""
        name, x = op_name(n), n.args[0]
        s = self.shape(x)
        dims = _arg(n, 1, "dim")
        if (name not in ("mean", "sum") or not isinstance(dims, (list, tuple)) or len(dims) != 1
                or int(dims[0]) % len(s) != len(s) - 1 or n.kwargs.get("dtype") is not None):
            return False
        rows, N = math.prod(s[:-1]), s[-1]
        X = te.placeholder((rows, N), name="X")
        k = te.reduce_axis(N, "k")
        scale = 1.0 / N if name == "mean" else 1.0
        out = te.compute((rows,), lambda i: te.sum(X[i, k] * scale, axis=k), name=name)

        def ref(a):
            r = np.asarray(a, dtype=np.float64)
            return [r.mean(axis=-1) if name == "mean" else r.sum(axis=-1)]
        task = self.net.task(Task(f"row_{name}_{rows}x{N}", [X, out], reference=ref))
        self.take([n], Subgraph(task, [n], [Operand((rows, N), node=x)], n))
        return True

    # ---------------------------------------------------------------- element-wise chains

    def chainable(self, n: fx.Node) -> bool:
        if n in self.taken:
            return False
        if op_name(n) == BN:
            return self.bn_affine(n)[0] is not None and len(n.users) == 1 and \
                op_name(next(iter(n.users))) == "getitem"
        if op_name(n) == "getitem":
            return op_name(n.args[0]) == BN and n.args[1] == 0
        return is_elementwise(n)

    def elementwise(self, n: fx.Node) -> bool:
        if op_name(n) == "getitem" or not self.chainable(n):
            return False
        chain = [n]
        while True:
            users = list(chain[-1].users)
            if len(users) != 1 or self.g.is_output(chain[-1]) or not self.chainable(users[0]):
                break
            chain.append(users[0])
        if op_name(chain[-1]) == BN:
            return False
        out_shape = self.shape(chain[-1])
        if not out_shape:
            return False                  # a scalar (0-d) result: PyTorch computes it
        known = self.known_elementwise(chain, out_shape)
        if known is not None:
            op, operands = known
            self.emit(op, chain, operands, chain[-1])
            return True
        self.generic_elementwise(chain, out_shape)
        return True

    def known_elementwise(self, chain, shape):
        """add / add_relu / silu_mul of tlmir.ops for the chains they compute exactly."""
        names = [op_name(c) for c in chain]
        first = chain[0]
        tensors = [a for a in first.args if isinstance(a, fx.Node)]
        plain_add = (names[0] == "add" and len(tensors) == 2 and len(first.args) == 2
                     and first.kwargs.get("alpha", 1) == 1
                     and all(self.shape(a) == shape and a not in self.g.constants for a in tensors))
        if plain_add and names == ["add"]:
            return ops.add(shape), [Operand(shape, node=a) for a in tensors]
        if plain_add and names == ["add", "relu"]:
            return ops.add_relu(shape), [Operand(shape, node=a) for a in tensors]
        if names == ["silu", "mul"] and len(shape) >= 2:
            other = [a for a in chain[1].args if a is not first]
            a = first.args[0]
            if (len(other) == 1 and isinstance(other[0], fx.Node) and self.shape(a) == shape
                    and self.shape(other[0]) == shape and other[0] not in self.g.constants):
                M = math.prod(shape[:-1])
                return ops.silu_mul(M, shape[-1]), [Operand((M, shape[-1]), node=a),
                                                    Operand((M, shape[-1]), node=other[0])]
        return None

    def generic_elementwise(self, chain: list, out_shape: tuple) -> None:
        """One te stage for the chain; its inputs are the chain's outside operands."""
        placeholders: dict = {}
        operands: list[Operand] = []

        def leaf_tensor(key, shape, operand: Operand) -> te.Tensor:
            if key not in placeholders:
                placeholders[key] = te.placeholder(shape, name=f"in{len(placeholders)}")
                operands.append(operand)
            return placeholders[key]

        def leaf_of(a: fx.Node):
            return lambda idx: broadcast_read(_leaf(a), out_shape, idx)

        def _leaf(a: fx.Node) -> te.Tensor:
            c = self.const(a)
            shape = self.shape(a)
            op = Operand(shape, const=c.float().contiguous()) if c is not None else Operand(shape, node=a)
            return leaf_tensor(a, shape, op)

        specials: dict[fx.Node, Callable] = {}
        for c in chain:
            if op_name(c) == BN:
                scale, shift = self.bn_affine(c)
                rank = len(self.shape(c.args[0]))
                cshape = (scale.numel(),) + (1,) * (rank - 2)
                sc = leaf_tensor((c, "scale"), cshape, Operand(cshape, const=scale.float().reshape(cshape)))
                sh = leaf_tensor((c, "shift"), cshape, Operand(cshape, const=shift.float().reshape(cshape)))
                specials[c] = (lambda sc, sh: lambda x, idx: x * broadcast_read(sc, out_shape, idx)
                               + broadcast_read(sh, out_shape, idx))(sc, sh)
            elif op_name(c) == "getitem":
                specials[c] = lambda x, idx: x

        def body(*idx):
            return chain_expr(chain, lambda a: leaf_of(a)(idx), specials, idx)
        out = te.compute(out_shape, body, name="out")
        words = [w for w in (op_name(c).strip("_") for c in chain) if w != "getitem"]
        words = ["batchnorm" if w == BN.strip("_") else w for w in words]
        name = "ewise_" + "_".join(words[:4]) + ("_etc" if len(words) > 4 else "") + \
            f"_{_shape(out_shape)}"
        args = [placeholders[k] for k in placeholders] + [out]
        task = Task(name, args, reference=_torch_reference(chain, placeholders))
        task = self.net.task(task)
        self.take(chain, Subgraph(task, chain, operands, chain[-1]))

    # ---------------------------------------------------------------- the walk

    def run(self) -> Partition:
        anchors = {"conv2d": self.conv, "convolution": self.conv, "conv_transpose2d": self.conv,
                   "linear": self.linear, "addmm": self.addmm, "matmul": self.matmul, "bmm": self.matmul,
                   "mm": self.matmul, "softmax": self.softmax, "_softmax": self.softmax,
                   "_safe_softmax": self.softmax,
                   "layer_norm": self.norm, "rms_norm": self.norm,
                   "max_pool2d": self.pool, "max_pool2d_with_indices": self.pool,
                   "avg_pool2d": self.pool, "adaptive_avg_pool2d": self.pool, "mean": self.pool,
                   "sum": self.row_reduce}
        for n in self.g.nodes:
            if n in self.taken:
                continue
            name = op_name(n)
            val = n.meta.get("val")
            float_out = isinstance(val, torch.Tensor) and val.dtype == torch.float32
            if float_out and name in anchors and anchors[name](n):
                continue
            if (float_out or name == BN) and self.elementwise(n):
                continue
            kind = "layout" if name in LAYOUT_OPS else "fallback"
            self.take([n], TorchStep(n, kind))
        steps = [s for _, s in sorted(self.groups, key=lambda p: p[0])]
        return Partition(steps, self.net)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _torch_reference(chain: list, placeholders: dict):
    """The chain evaluated by PyTorch in float64: a task reference independent of te."""
    keys = list(placeholders)

    def ref(*arrays):
        env = {}
        for k, a in zip(keys, arrays):
            env[k] = torch.from_numpy(np.asarray(a, dtype=np.float64))
        for c in chain:
            if op_name(c) == BN:
                env[c] = env[c.args[0]] * env[(c, "scale")] + env[(c, "shift")]
                continue
            if op_name(c) == "getitem":
                env[c] = env[c.args[0]]
                continue
            args = [env[a] if isinstance(a, fx.Node) else a for a in c.args]
            env[c] = c.target(*args, **c.kwargs)
        return [env[chain[-1]].numpy()]
    return ref


def partition(graph: Graph) -> Partition:
    """Cut `graph` into tlmir subgraphs and PyTorch steps, in execution order."""
    return _Cutter(graph).run()
