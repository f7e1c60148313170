"""The package's modules import one another without cycles and never upward through the
layer table below, function-level imports included (a lazy import is still an edge): each
layer can be read, tested and changed with only the layers below it."""
import ast
import os

import tlmir

ROOT = os.path.dirname(os.path.abspath(tlmir.__file__))


def _modules() -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the tlmir modules it imports anywhere in its body."""
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        package = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[mod] = {e for e in edges if e in mods and e != mod and e != "tlmir"}
    return graph


# Low to high; a module may import its own layer and those below. An entry names a module,
# or with ".*" a package and all of its modules; a module's exact entry wins over a package's.
# Layers are per module, not per package: runtime holds data (target, task), backends and
# measurement, and lm holds the tensor language below search and the model's workflow above.
# The tensor language (lm.language, lm.tokenizer, the GPT-2 of lm.model and its checkpoint
# format) is declared a layer below search rather than moved out of lm: search's world-model
# evaluator reads sentences of it, and lm's strategies register into search, so either it is
# below both or there is a cycle. Its own imports (ir, runtime.target, schedule, workloads)
# already allow it, and moving it would rename what 25 modules, tests and scripts import.
# The names a tokenizer reads by place and the novel tasks whose words it walks
# (lm.place_names, lm.novel_tasks: ops, te and workloads only) belong to it.
# tlmir.lm (the package's __init__) is in that layer too, since importing lm.language runs it.
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["tlmir.errors", "tlmir.te", "tlmir.ir.*"]),
    ("data", ["tlmir.ops.*", "tlmir.runtime", "tlmir.runtime.files", "tlmir.runtime.target", "tlmir.runtime.gpu",
              "tlmir.runtime.task", "tlmir.workloads.*", "tlmir.zoo.*"]),
    ("schedule", ["tlmir.schedule.*"]),
    ("language", ["tlmir.lm", "tlmir.lm.language", "tlmir.lm.place_names", "tlmir.lm.tokenizer",
                  "tlmir.lm.novel_tasks", "tlmir.lm.model", "tlmir.lm.checkpoint"]),
    ("backends", ["tlmir.runtime.backend", "tlmir.runtime.interpreter", "tlmir.runtime.interp_backend",
                  "tlmir.runtime.inplace",
                  "tlmir.codegen_cpu.*", "tlmir.codegen_cuda.*", "tlmir.build"]),
    ("measurement", ["tlmir.runtime.measure", "tlmir.runtime.worker", "tlmir.runtime.worker_process",
                     "tlmir.runtime.records", "tlmir.runtime.run_lock"]),
    ("search", ["tlmir.search.*"]),
    ("lm", ["tlmir.lm.*"]),
    ("applications", ["tlmir.evaluate", "tlmir.frontend.*", "tlmir.lm.commands", "tlmir.argtypes"]),
    ("entry points", ["tlmir", "tlmir.cli", "tlmir.demo"]),
]


def layer_of(mod: str, layers: list[tuple[str, list[str]]] = LAYERS) -> int | None:
    """The index in `layers` of `mod`'s exact entry, else of the innermost package entry
    holding it; None when no entry names it."""
    best, depth = None, -1
    for i, (_, entries) in enumerate(layers):
        for e in entries:
            if e == mod:
                return i
            pkg = e.removesuffix(".*")
            if e.endswith(".*") and (mod == pkg or mod.startswith(pkg + ".")) and pkg.count(".") > depth:
                best, depth = i, pkg.count(".")
    return best


def loaded_by(graph: dict[str, set[str]], mod: str) -> set[str]:
    """What `mod`'s imports run: each module it imports and the packages around that module
    (their __init__ runs first), except `mod`'s own packages (already running) and the root
    (its __init__ runs on every import)."""
    out = set()
    for target in graph[mod]:
        out.add(target)
        parts = target.split(".")
        for n in range(2, len(parts)):
            pkg = ".".join(parts[:n])
            if pkg in graph and not mod.startswith(pkg + "."):
                out.add(pkg)
    return out


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, list[str]]] = LAYERS) -> list[str]:
    """"importer (layer) -> imported (layer)" for every import of a higher layer."""
    out = []
    for mod in sorted(graph):
        low = layer_of(mod, layers)
        for target in sorted(loaded_by(graph, mod)):
            high = layer_of(target, layers)
            if high > low:
                out.append(f"{mod} ({layers[low][0]}) -> {target} ({layers[high][0]})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and "tlmir.search.strategy" in graph["tlmir.search.tune"]
    assert cycles(graph) == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_has_a_layer():
    assert [m for m in sorted(import_graph()) if layer_of(m) is None] == []


def test_no_upward_imports():
    assert upward_imports(import_graph()) == []


def test_the_checker_finds_an_upward_import():
    graph = import_graph()
    graph["tlmir.runtime.task"] = graph["tlmir.runtime.task"] | {"tlmir.build"}
    graph["tlmir.search.rankers"] = graph["tlmir.search.rankers"] | {"tlmir.codegen_cpu.jit"}  # downward
    graph["tlmir.lm.language"] = graph["tlmir.lm.language"] | {"tlmir.search.features"}
    assert upward_imports(graph) == [
        "tlmir.lm.language (language) -> tlmir.search (search)",
        "tlmir.lm.language (language) -> tlmir.search.features (search)",
        "tlmir.runtime.task (data) -> tlmir.build (backends)"]
    toy = [("low", ["p.a.*", "p.b.x"]), ("high", ["p.b.*"])]
    assert layer_of("p.b.x", toy) == 0 and layer_of("p.b.y", toy) == 1 and layer_of("p.c", toy) is None
    assert upward_imports({"p.a.m": {"p.b.x"}, "p.b": set(), "p.b.x": set(), "p.b.y": {"p.a.m"}}, toy) == [
        "p.a.m (low) -> p.b (high)"]


def test_code_generators_are_reached_through_the_backend_registry():
    """Only runtime.backend loads codegen_cpu and codegen_cuda (by name); the one exception
    is `tlmir show`, which prints the program the CPU backend's prefetch pass makes of a
    schedule's."""
    graph = import_graph()
    users = {m for m in graph if not m.startswith("tlmir.codegen_cpu")
             and any(t.startswith("tlmir.codegen_cpu") for t in graph[m])}
    assert users == {"tlmir.cli"}
    assert {m for m in graph if not m.startswith("tlmir.codegen_cuda")
            and any(t.startswith("tlmir.codegen_cuda") for t in graph[m])} == set()


def test_importing_tlmir_loads_neither_torch_nor_a_code_generator():
    """Nor do the op modules, which declare their PyTorch baselines (torch imported inside)."""
    import subprocess
    import sys
    code = ("import sys, tlmir, tlmir.ops.baselines; "
            "print('torch' in sys.modules or 'tlmir.codegen_cpu' in sys.modules or 'tlmir.codegen_cuda' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(ROOT)})
    assert out.stdout.strip() == "False", out.stderr
