"""Capture: a PyTorch module (or a TorchDynamo graph) as a functional ATen graph.

`torch.export` traces the module; `run_decompositions` makes it functional (in-place
ops become out-of-place) without breaking the ops tlmir maps (conv2d, linear, layer_norm,
softmax, matmul stay whole), and decomposes scaled_dot_product_attention into them
(`attention.DECOMPOSITIONS`). Parameters and buffers become constants, frozen at capture
time (as Inductor's `freezing`); nodes whose inputs are all constants are folded.
Export's assertion nodes (`_assert_tensor_metadata` and the like) are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ..errors import FrontendError
from .attention import DECOMPOSITIONS


@dataclass
class Graph:
    """A functional ATen graph: `nodes` in topological order (call_function only),
    `inputs` the user-input placeholders in call order, `constants` the frozen tensors."""
    module: fx.GraphModule
    inputs: list[fx.Node]
    outputs: list[fx.Node | None]          # None: an output that is a constant
    constants: dict[fx.Node, torch.Tensor]
    out_spec: Any = None
    const_outputs: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def nodes(self) -> list[fx.Node]:
        return [n for n in self.module.graph.nodes
                if n.op == "call_function" and n not in self.constants]

    def shape(self, node: fx.Node) -> tuple[int, ...]:
        return tuple(int(s) for s in node.meta["val"].shape)

    def is_output(self, node: fx.Node) -> bool:
        return node in self.outputs


def op_name(node: fx.Node) -> str:
    """'conv2d' for aten.conv2d.default, 'getitem' for operator.getitem."""
    t = node.target
    packet = getattr(t, "overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(t, "__name__", str(t))


def _check_inputs(example_inputs: Sequence) -> tuple:
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise FrontendError(f"import: example input {i} is a {type(x).__name__}; "
                                f"give tensors (positional) only")
        if x.device.type != "cpu":
            raise FrontendError(f"import: example input {i} is on {x.device}; tlmir runs on CPU")
    return tuple(example_inputs)


def capture(module: torch.nn.Module, example_inputs: Sequence) -> Graph:
    """Export `module` on `example_inputs` (positional tensors) into a Graph."""
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"import: expected a torch.nn.Module, got {type(module).__name__}")
    args = _check_inputs(example_inputs)
    try:
        ep = torch.export.export(module, args, strict=False)
        ep = ep.run_decompositions(dict(DECOMPOSITIONS))
    except Exception as e:  # torch raises many types; the message is what matters
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(f"import: torch.export failed on {type(module).__name__}: {first}") from None
    constants, by_name = _lifted(ep)
    inputs = [by_name[name] for name in ep.graph_signature.user_inputs]
    return _finish(ep.graph_module, inputs, constants, ep.call_spec.out_spec)


def _lifted(ep) -> tuple[dict, dict]:
    """(placeholder -> tensor for parameters, buffers and lifted constants; name -> placeholder)."""
    sig = ep.graph_signature
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
             **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    by_name = {n.name: n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    return {by_name[k]: state[v].detach() for k, v in names.items()}, by_name


def capture_fx(gm: fx.GraphModule, example_inputs: Sequence, frozen: Sequence[bool]) -> Graph:
    """A TorchDynamo graph as a Graph: inputs marked `frozen` (parameters, buffers) become
    constants holding their example values."""
    args = _check_inputs(example_inputs)
    try:
        ep = torch.export.export(gm, args, strict=False).run_decompositions(dict(DECOMPOSITIONS))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(f"torch.compile backend tlmir: torch.export failed: {first}") from None
    constants, by_name = _lifted(ep)
    inputs = []
    for name, x, fz in zip(ep.graph_signature.user_inputs, args, frozen):
        if fz:
            constants[by_name[name]] = x.detach()
        else:
            inputs.append(by_name[name])
    return _finish(ep.graph_module, inputs, constants, ep.call_spec.out_spec)


def _finish(gm: fx.GraphModule, inputs: list, constants: dict, out_spec) -> Graph:
    for n in inputs:
        val = n.meta.get("val")
        if val is None or any(not isinstance(s, int) for s in val.shape):
            raise FrontendError(f"import: input {n.name} has dynamic shape "
                                f"{tuple(val.shape) if val is not None else '?'}; tlmir compiles "
                                f"static shapes (torch.compile(..., dynamic=False))")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat = list(pytree.tree_leaves(out_node.args[0]))
    _drop_assertions(gm)
    _fold_constants(gm, constants)
    outputs, const_outputs = [], {}
    for i, o in enumerate(flat):
        if not isinstance(o, fx.Node):
            raise FrontendError(f"import: output {i} is not a tensor ({type(o).__name__})")
        if o in constants:
            outputs.append(None)
            const_outputs[i] = constants[o]
        elif o.op == "placeholder":
            raise FrontendError(f"import: output {i} returns input {o.name} unchanged; "
                                f"nothing to compile")
        else:
            outputs.append(o)
    graph = Graph(gm, inputs, outputs, constants, out_spec, const_outputs)
    for n in graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and any(not isinstance(s, int) for s in val.shape):
            raise FrontendError(f"import: {n.name} ({op_name(n)}) has dynamic shape "
                                f"{tuple(val.shape)}; tlmir compiles static shapes")
    return graph


ASSERTIONS = {"_assert_tensor_metadata", "_assert_async", "_assert_scalar", "sym_constrain_range",
              "sym_constrain_range_for_size"}


def _drop_assertions(gm: fx.GraphModule) -> None:
    """Erase export's runtime checks (dtype / shape metadata, constraints on sizes): they
    compute nothing, and a compiled model checks its inputs' shapes and dtypes itself."""
    for n in reversed(list(gm.graph.nodes)):
        if n.op == "call_function" and op_name(n) in ASSERTIONS and not n.users:
            gm.graph.erase_node(n)


RANDOM_OPS = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "bernoulli",
              "normal", "uniform", "dropout", "native_dropout", "empty", "empty_like",
              "scaled_dot_product_attention"}   # what capture leaves of SDPA has dropout


def _fold_constants(gm: fx.GraphModule, constants: dict) -> None:
    """Evaluate, once, every call whose tensor inputs are all constants."""
    def value(a):
        return constants[a] if isinstance(a, fx.Node) else a
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        deps = n.all_input_nodes
        if all(d in constants for d in deps) and op_name(n) not in RANDOM_OPS:
            args = pytree.tree_map(value, n.args)
            kwargs = pytree.tree_map(value, n.kwargs)
            with torch.no_grad():
                out = n.target(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                constants[n] = out
            elif isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
                constants[n] = out  # a tuple: its getitem users fold next
