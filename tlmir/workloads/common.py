"""`Net`: collects a network's fused subgraphs as tuning tasks, merging identical ones.

Each `Net` method adds one fused subgraph (an op of tlmir.ops) `times` times and, for the
layer kinds that change the activation shape, returns the output's shape, so a network is
written as a walk over its layer table. Identical subgraphs (same `Task.key`) are merged
into one task whose weight is the number of occurrences, as Ansor/TLM task extraction does.

Task names spell out the subgraph: op (with its fused epilogue), then shapes, e.g.
``conv2d_bias_relu_1x64x56x56_k64_3x3_s1_p1`` (N x C x H x W input, K output channels,
R x S kernel, stride, padding, ``_g32`` for groups), ``dense_bias_gelu_m128_n3072_k768``
(X: M x K, W: N x K), ``batch_matmul_b12_m128_n128_k64``, ``softmax_1536x128``.
"""
from __future__ import annotations

from .. import ops
from ..ops.base import OpDef
from ..runtime.task import Task


def _hw(v) -> str:
    """'3' for 3 or (3, 3), '1x7' for (1, 7)."""
    if isinstance(v, (tuple, list)):
        return str(v[0]) if v[0] == v[1] else f"{v[0]}x{v[1]}"
    return str(v)


def _pair(v) -> tuple[int, int]:
    return (v[0], v[1]) if isinstance(v, (tuple, list)) else (v, v)


def _shape(shape) -> str:
    return "x".join(str(s) for s in shape)


def _epilogue(p: dict) -> str:
    return ("_bias" if p.get("bias") else "") + (f"_{p['act']}" if p.get("act") else "")


def _window(p: dict) -> str:
    """'_3x3_s2_p1' (+ '_d2' for a dilation, '_g32' for groups) of a conv / pool."""
    return (f"_s{_hw(p['stride'])}_p{_hw(p['padding'])}"
            + (f"_d{_hw(p['dilation'])}" if _pair(p.get("dilation", 1)) != (1, 1) else "")
            + (f"_g{p['groups']}" if p.get("groups", 1) > 1 else ""))


def task_name(op: OpDef) -> str:
    """The name a network's task of `op` goes by: the op (with its fused epilogue), then
    its shapes, e.g. conv2d_bias_relu_1x64x56x56_k64_3x3_s1_p1 or dense_bias_gelu_m128_n3072_k768."""
    p, family = op.params, op.family
    if "N" in p and "C" in p and "H" in p:
        image = f"{p['N']}x{p['C']}x{p['H']}x{p['W']}"
        if family in ("max_pool2d", "avg_pool2d"):
            return f"{family}_{image}_{_hw(p['kernel'])}{_window(p)}"
        kernel = f"{p['R']}x{p['S']}"
        if family == "depthwise_conv2d_nchw":
            return f"depthwise_conv2d{_epilogue(p)}_{image}_{kernel}{_window(p)}"
        if family == "conv2d_transpose_nchw":
            return f"conv2d_transpose{_epilogue(p)}_{image}_k{p['K']}_{kernel}{_window(p)}"
        stem = family + (f"_{p['act']}" if family == "conv2d_bias" and p.get("act") else "")
        return f"{stem}_{image}_k{p['K']}_{kernel}{_window(p)}"
    if family == "dense":
        return f"dense{_epilogue(p)}_m{p['M']}_n{p['N']}_k{p['K']}"
    if family == "matmul":
        return f"matmul_m{p['M']}_n{p['N']}_k{p['K']}"
    if family == "batch_matmul":
        epilogue = ("_scale" if p.get("scale") is not None else "") + ("_mask" if p.get("mask") else "")
        return f"batch_matmul{epilogue}_b{p['B']}_m{p['M']}_n{p['N']}_k{p['K']}"
    if family in ("layernorm", "rmsnorm"):
        return f"{family}_{p['M']}x{p['N']}_eps{p['eps']:g}"
    if "shape" in p:
        return f"{family}_{_shape(p['shape'])}"
    if "M" in p and "N" in p:
        return f"{family}_{p['M']}x{p['N']}"
    return family


class Net:
    """The task list of one network under construction (batch size `n` for the CNN helpers)."""

    def __init__(self, n: int = 1):
        self.n = n
        self._tasks: dict[str, list] = {}   # key -> [Task, weight]; insertion-ordered

    def op(self, op: OpDef, name: str | None = None, times: float = 1) -> Task:
        """Add the OpDef `op` as a task named `name` (default: task_name(op)), occurring
        `times` times; returns the task, the one already listed if identical."""
        task = Task.from_op(op, name=name or task_name(op))
        return self.task(task, times)

    def task(self, task: Task, times: float = 1) -> Task:
        """Add `task` (any te definition), occurring `times` times; returns the listed one."""
        if task.key in self._tasks:
            self._tasks[task.key][1] += times
        else:
            self._tasks[task.key] = [task, times]
        return self._tasks[task.key][0]

    def tasks(self) -> list[tuple[Task, float]]:
        out = []
        for task, w in self._tasks.values():
            task.weight = float(w)
            out.append((task, float(w)))
        return out

    # ------------------------------------------------------------ CNN layers (NCHW)

    def conv(self, c: int, h: int, w: int, k: int, kernel, stride=1, padding=0, groups: int = 1,
             relu: bool = True, times: float = 1) -> tuple[int, int, int]:
        """conv (+ folded-BN bias + ReLU when `relu`, else the plain conv); returns (k, p, q)."""
        r, s = _pair(kernel)
        fn = ops.conv2d_bias_relu if relu else ops.conv2d_nchw
        op = fn(self.n, c, h, w, k, r, s, stride=stride, padding=padding, groups=groups)
        self.op(op, times=times)
        return (k,) + tuple(op.outputs[0].shape[2:])

    def depthwise(self, c: int, h: int, w: int, kernel=3, stride=1, padding=1,
                  times: float = 1) -> tuple[int, int, int]:
        r, s = _pair(kernel)
        op = ops.depthwise_conv2d_nchw(self.n, c, h, w, r, s, stride=stride, padding=padding)
        self.op(op, times=times)
        return (c,) + tuple(op.outputs[0].shape[2:])

    def conv_transpose(self, c: int, h: int, w: int, k: int, kernel, stride=1, padding=0,
                       act: str | None = "relu", bias: bool = True,
                       times: float = 1) -> tuple[int, int, int]:
        r, s = _pair(kernel)
        op = ops.conv2d_transpose_nchw(self.n, c, h, w, k, r, s, stride=stride, padding=padding,
                                       bias=bias, act=act)
        self.op(op, times=times)
        return (k,) + tuple(op.outputs[0].shape[2:])

    def pool(self, kind: str, c: int, h: int, w: int, kernel, stride=None, padding=0,
             times: float = 1) -> tuple[int, int, int]:
        """kind 'max' or 'avg'; stride defaults to the kernel."""
        fn = ops.max_pool2d if kind == "max" else ops.avg_pool2d
        stride = kernel if stride is None else stride
        op = fn(self.n, c, h, w, kernel=kernel, stride=stride, padding=padding)
        self.op(op, times=times)
        return (c,) + tuple(op.outputs[0].shape[2:])

    def global_pool(self, c: int, h: int, w: int) -> tuple[int, int, int]:
        return self.pool("avg", c, h, w, (h, w) if h != w else h)

    # ------------------------------------------------------------ dense / attention

    def dense(self, m: int, n: int, k: int, bias: bool = True, act: str | None = None,
              times: float = 1) -> None:
        self.op(ops.dense(m, n, k, bias=bias, act=act), times=times)

    def batch_matmul(self, b: int, m: int, n: int, k: int, times: float = 1) -> None:
        self.op(ops.batch_matmul(b, m, n, k), times=times)

    def softmax(self, m: int, n: int, times: float = 1) -> None:
        self.op(ops.softmax(m, n), times=times)

    def layernorm(self, m: int, n: int, eps: float, times: float = 1) -> None:
        self.op(ops.layernorm(m, n, eps=eps), times=times)

    def rmsnorm(self, m: int, n: int, eps: float, times: float = 1) -> None:
        self.op(ops.rmsnorm(m, n, eps=eps), times=times)

    # ------------------------------------------------------------ element-wise

    def residual(self, shape, relu: bool = False, times: float = 1) -> None:
        """Residual add (`add_relu` when a ReLU follows it, as in ResNet)."""
        op = ops.add_relu(tuple(shape)) if relu else ops.add(tuple(shape))
        self.op(op, times=times)

    def silu_mul(self, m: int, n: int, times: float = 1) -> None:
        self.op(ops.silu_mul(m, n), times=times)
