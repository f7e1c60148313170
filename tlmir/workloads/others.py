"""Networks of other kinds: image generators built on transposed convolutions.

DCGAN is held out; the pix2pix U-Net and a convolutional autoencoder are in training, so
transposed convolutions (and their ReLU / tanh epilogues) are an op type the TLM learns
from other networks' shapes. Both use 4x4 / stride-2 / pad-1 transposed convolutions: the
tensor language spells a task's index expressions as words, and another kernel geometry
(CycleGAN's 3x3 with output padding, U-Net's 2x2) has words the shipped vocabulary lacks
(tests/test_vocabulary.py)."""
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


def pix2pix_unet(n: int = 1, image: int = 256, ngf: int = 64, out_channels: int = 3) -> Net:
    """The pix2pix U-Net generator (Isola et al. 2017, `unet_256`; `unet_128` at 128 has one
    level less): 4x4 / stride-2 / pad-1 convs down to 1x1, each with BatchNorm folded into
    a bias, then 4x4 / stride-2 transposed convs back up, each reading its input
    concatenated with the skip connection (twice the channels), + bias + ReLU, the last
    + bias + tanh. The encoder's LeakyReLU is written as ReLU (the op library's conv
    epilogue); the loop nest is the same."""
    net = Net(n)
    down = [ngf, ngf * 2, ngf * 4] + [ngf * 8] * 8
    enc, c, h = [], 3, image
    while h > 1:
        k = down[len(enc)]
        c, h, _ = net.conv(c, h, h, k, 4, stride=2, padding=1)
        enc.append(c)
    for i, skip in enumerate(reversed(enc[:-1])):
        cin = c if i == 0 else 2 * c
        c, h, _ = net.conv_transpose(cin, h, h, skip, 4, stride=2, padding=1, act="relu")
    net.conv_transpose(2 * c, h, h, out_channels, 4, stride=2, padding=1, act="tanh")
    return net


def conv_autoencoder(n: int = 1, image: int = 64, width: int = 32, levels: int = 3) -> Net:
    """A convolutional autoencoder: `levels` 3x3 / stride-2 convs + ReLU doubling the
    channels, then 4x4 / stride-2 / pad-1 transposed convs + bias + ReLU halving them back,
    the last to the 3 image channels + tanh (no bias)."""
    net = Net(n)
    c, h, w = 3, image, image
    k = width
    for _ in range(levels):
        c, h, w = net.conv(c, h, w, k, 3, stride=2, padding=1)
        k *= 2
    for _ in range(levels - 1):
        c, h, w = net.conv_transpose(c, h, w, c // 2, 4, stride=2, padding=1)
    net.conv_transpose(c, h, w, 3, 4, stride=2, padding=1, act="tanh", bias=False)
    return net
