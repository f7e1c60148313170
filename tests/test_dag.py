"""Stage classification: the facts the derivation rules will test."""
from tlmir import ops
from tlmir.ir.dag import ComputeDAG


def test_matmul_needs_tiling():
    dag = ComputeDAG(ops.matmul(64, 64, 64).outputs)
    assert [s.kind for s in dag.stages] == ["placeholder", "placeholder", "reduction"]
    c = dag["C"]
    assert c.needs_multi_level_tiling and not c.strictly_inlinable and c.is_output
    assert c.producers == ["A", "B"] and dag["A"].consumers == ["C"]


def test_conv_bias_relu_classification():
    dag = ComputeDAG(ops.conv2d_bias_relu(1, 8, 8, 8, 8, 3, 3, padding=1).outputs)
    assert dag["conv"].needs_multi_level_tiling
    assert not dag["pad"].strictly_inlinable  # a branch (padding select)
    assert dag["bias"].strictly_inlinable      # broadcast read of b[k] is simple
    assert dag["relu"].kind == "injective" and dag["relu"].is_output


def test_softmax_classification():
    dag = ComputeDAG(ops.softmax(16, 32).outputs)
    assert dag["max"].kind == "reduction" and not dag["max"].needs_multi_level_tiling
    assert dag["exp"].has_expensive_op and not dag["exp"].strictly_inlinable
    assert dag["out"].strictly_inlinable is True
    assert "reads [exp, sum]" in str(dag)


def test_elementwise_complex_access():
    from tlmir import te
    A = te.placeholder((8, 8), name="A")
    T = te.compute((8, 8), lambda i, j: A[j, i], name="T")
    assert not ComputeDAG([T])["T"].strictly_inlinable
