"""Networks of other kinds: the DCGAN generator (transposed convolutions)."""
from __future__ import annotations

from .common import Net


def dcgan_generator(n: int = 1, code: int = 100, ngf: int = 128, out_channels: int = 3) -> Net:
    """DCGAN generator as in tvm.relay.testing.dcgan (64x64 output): dense(code -> 4*4*8ngf)
    + ReLU (no bias), reshape, three 4x4 / stride-2 / pad-1 transposed convs each with its
    BatchNorm folded into a bias and a ReLU, and a last transposed conv + tanh.

    The transposed convolutions use the `conv2d_transpose_nchw` op (added for this), which
    computes them as topi does: a zero-inserting pad stage, then a stride-1 convolution
    with the flipped kernel."""
    net = Net(n)
    net.dense(n, 4 * 4 * ngf * 8, code, bias=False, act="relu")
    c, h, w = ngf * 8, 4, 4
    for k in (ngf * 4, ngf * 2, ngf):
        c, h, w = net.conv_transpose(c, h, w, k, 4, stride=2, padding=1, act="relu")
    net.conv_transpose(c, h, w, out_channels, 4, stride=2, padding=1, act="tanh", bias=False)
    return net
