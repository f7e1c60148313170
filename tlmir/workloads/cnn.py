"""Convolutional networks (NCHW, float32), written from their torchvision layer tables.

Modelling conventions (the fused subgraphs TVM's Relay fusion / Ansor extract):

* conv + BatchNorm + ReLU -> `conv2d_bias_relu` (BN folded into the conv weight and a bias);
  a conv followed by no activation (ResNet's last 1x1 of a block and its downsample,
  MobileNetV2's linear projection, DenseNet's 3x3 / transition convs) -> plain `conv2d_nchw`
  (the folded-BN bias add is left out).
* ResNet's residual add + ReLU -> `add_relu`; MobileNetV2's residual (no ReLU) -> `add`.
* MobileNet's ReLU6 is modelled as ReLU; a depthwise conv -> `depthwise_conv2d_nchw` alone
  (its BN + ReLU6 epilogue is left out: the conv dominates the subgraph).
* DenseNet's pre-activation BN + ReLU on the concatenated features (an injective op fused
  with the concat) is left out; its bottleneck 1x1 conv is followed by BN + ReLU and so is
  `conv2d_bias_relu`. Concats and flattens are free (no task).
* Pooling -> `max_pool2d` / `avg_pool2d` (global average pooling = avg pool over the whole
  map); the classifier -> `dense` with bias (and ReLU inside VGG's classifier).
"""
from __future__ import annotations

from .common import Net

# ------------------------------------------------------------------ ResNet / ResNeXt


def _bottleneck(net: Net, c: int, h: int, w: int, width: int, out: int, stride: int,
                groups: int) -> tuple[int, int, int]:
    """A bottleneck block (ResNet v1.5, ResNeXt, RegNetX): a 1x1 projection where the
    shape changes, 1x1 -> grouped 3x3 carrying the stride -> 1x1 without ReLU, residual
    add + ReLU; returns (k, p, q)."""
    if stride != 1 or c != out:
        net.conv(c, h, w, out, 1, stride=stride, relu=False)      # downsample
    k, p, q = net.conv(c, h, w, width, 1)
    k, p, q = net.conv(k, p, q, width, 3, stride=stride, padding=1, groups=groups)
    k, p, q = net.conv(k, p, q, out, 1, relu=False)
    net.residual((net.n, k, p, q), relu=True)
    return k, p, q


def resnet(layers, bottleneck: bool, n: int = 1, image: int = 224, groups: int = 1,
           width_per_group: int = 64) -> Net:
    """torchvision ResNet (v1.5: the stride sits on the 3x3 conv of a bottleneck)."""
    net = Net(n)
    c, h, w = net.conv(3, image, image, 64, 7, stride=2, padding=3)
    c, h, w = net.pool("max", c, h, w, 3, stride=2, padding=1)
    for stage, blocks in enumerate(layers):
        planes = 64 * 2 ** stage
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            if bottleneck:
                width = planes * width_per_group // 64 * groups
                c, h, w = _bottleneck(net, c, h, w, width, planes * 4, stride, groups)
                continue
            if stride != 1 or c != planes:
                net.conv(c, h, w, planes, 1, stride=stride, relu=False)   # downsample
            k, p, q = net.conv(c, h, w, planes, 3, stride=stride, padding=1)
            k, p, q = net.conv(k, p, q, planes, 3, padding=1, relu=False)
            net.residual((n, k, p, q), relu=True)
            c, h, w = k, p, q
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


def resnet18(n: int = 1, image: int = 224) -> Net:
    return resnet((2, 2, 2, 2), False, n, image)


def resnet34(n: int = 1, image: int = 224) -> Net:
    return resnet((3, 4, 6, 3), False, n, image)


def resnet50(n: int = 1) -> Net:
    return resnet((3, 4, 6, 3), True, n)


def resnext50_32x4d(n: int = 1) -> Net:
    return resnet((3, 4, 6, 3), True, n, groups=32, width_per_group=4)


# ------------------------------------------------------------------ RegNetX

# RegNetX configurations (pycls / torchvision): (depths, widths, group width) per stage.
# Only group widths whose grouped index the language spells (`k//8*8+rc`, 4, 16 and 32:
# the held-out ResNeXt's and these), not 1.6GF's 24 or 3.2GF's 48.
REGNET_X = {
    "200mf": ((1, 1, 4, 7), (24, 56, 152, 368), 8),
    "400mf": ((1, 2, 7, 12), (32, 64, 160, 400), 16),
    "800mf": ((1, 3, 7, 5), (64, 128, 288, 672), 16),
}


def regnet_x(config: str = "400mf", n: int = 1, image: int = 224, group_width: int | None = None) -> Net:
    """torchvision RegNetX: a 32-channel 3x3 stem, then per stage bottleneck blocks of the
    stage's width (no expansion), the 3x3 in `width / group width` groups, the first
    block carrying the stage's stride. `group_width` replaces the configuration's (the
    RegNet design space's group-width axis): grouped convs of few channels per group."""
    depths, widths, default_width = REGNET_X[config]
    group_width = group_width or default_width
    net = Net(n)
    c, h, w = net.conv(3, image, image, 32, 3, stride=2, padding=1)
    for depth, width in zip(depths, widths):
        for b in range(depth):
            c, h, w = _bottleneck(net, c, h, w, width, width, 2 if b == 0 else 1, width // group_width)
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


# ------------------------------------------------------------------ MobileNets


def mobilenet_v2(n: int = 1, image: int = 224) -> Net:
    net = Net(n)
    c, h, w = net.conv(3, image, image, 32, 3, stride=2, padding=1)
    for t, out, reps, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                            (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(reps):
            stride = s if i == 0 else 1
            k, p, q = (c, h, w) if t == 1 else net.conv(c, h, w, c * t, 1)   # expand
            k, p, q = net.depthwise(k, p, q, 3, stride=stride, padding=1)
            k, p, q = net.conv(k, p, q, out, 1, relu=False)                  # linear project
            if stride == 1 and c == out:
                net.residual((n, k, p, q))
            c, h, w = k, p, q
    c, h, w = net.conv(c, h, w, 1280, 1)
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


def mobilenet_v1(n: int = 1, image: int = 224, width: float = 1.0) -> Net:
    """MobileNetV1 with width multiplier `width` (every layer has int(channels * width))."""
    net = Net(n)
    c, h, w = net.conv(3, image, image, int(32 * width), 3, stride=2, padding=1)
    for out, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + \
            [(512, 1)] * 5 + [(1024, 2), (1024, 1)]:
        c, h, w = net.depthwise(c, h, w, 3, stride=stride, padding=1)
        c, h, w = net.conv(c, h, w, int(out * width), 1)
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


# ------------------------------------------------------------------ DenseNet


def densenet(blocks=(6, 12, 24, 16), growth: int = 32, init: int = 64, n: int = 1) -> Net:
    net = Net(n)
    c, h, w = net.conv(3, 224, 224, init, 7, stride=2, padding=3)
    c, h, w = net.pool("max", c, h, w, 3, stride=2, padding=1)
    for i, layers in enumerate(blocks):
        for j in range(layers):
            k, p, q = net.conv(c + j * growth, h, w, 4 * growth, 1)         # 1x1 then BN-ReLU
            net.conv(k, p, q, growth, 3, padding=1, relu=False)              # conv3x3 -> concat
        c += layers * growth
        if i < len(blocks) - 1:                                              # transition
            c, h, w = net.conv(c, h, w, c // 2, 1, relu=False)
            c, h, w = net.pool("avg", c, h, w, 2, stride=2)
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


# ------------------------------------------------------------------ Inception-v3


def inception_v3(n: int = 1) -> Net:
    """torchvision Inception3 at 299x299 (no aux head); every BasicConv2d is conv+BN+ReLU."""
    net = Net(n)
    cv = net.conv
    c, h, w = cv(3, 299, 299, 32, 3, stride=2)
    c, h, w = cv(c, h, w, 32, 3)
    c, h, w = cv(c, h, w, 64, 3, padding=1)
    c, h, w = net.pool("max", c, h, w, 3, stride=2)
    c, h, w = cv(c, h, w, 80, 1)
    c, h, w = cv(c, h, w, 192, 3)
    c, h, w = net.pool("max", c, h, w, 3, stride=2)

    def pool_branch(c, h, w, out):
        net.pool("avg", c, h, w, 3, stride=1, padding=1)
        return cv(c, h, w, out, 1)[0]

    for pf in (32, 64, 64):                                                  # InceptionA x3
        b1 = cv(c, h, w, 64, 1)[0]
        b5 = cv(*cv(c, h, w, 48, 1), 64, 5, padding=2)[0]
        b3 = cv(*cv(*cv(c, h, w, 64, 1), 96, 3, padding=1), 96, 3, padding=1)[0]
        c = b1 + b5 + b3 + pool_branch(c, h, w, pf)
    b3 = cv(c, h, w, 384, 3, stride=2)[0]                                    # InceptionB
    b3d, h2, w2 = cv(*cv(*cv(c, h, w, 64, 1), 96, 3, padding=1), 96, 3, stride=2)
    net.pool("max", c, h, w, 3, stride=2)
    c, h, w = b3 + b3d + c, h2, w2
    for c7 in (128, 160, 160, 192):                                          # InceptionC x4
        b1 = cv(c, h, w, 192, 1)[0]
        b7 = cv(*cv(*cv(c, h, w, c7, 1), c7, (1, 7), padding=(0, 3)), 192, (7, 1),
                padding=(3, 0))[0]
        x = cv(c, h, w, c7, 1)
        for out, kern, pad in [(c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)),
                               (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))]:
            x = cv(*x, out, kern, padding=pad)
        c = b1 + b7 + x[0] + pool_branch(c, h, w, 192)
    b3, h2, w2 = cv(*cv(c, h, w, 192, 1), 320, 3, stride=2)                  # InceptionD
    x = cv(*cv(*cv(c, h, w, 192, 1), 192, (1, 7), padding=(0, 3)), 192, (7, 1), padding=(3, 0))
    b7 = cv(*x, 192, 3, stride=2)[0]
    net.pool("max", c, h, w, 3, stride=2)
    c, h, w = b3 + b7 + c, h2, w2
    for _ in range(2):                                                       # InceptionE x2
        b1 = cv(c, h, w, 320, 1)[0]
        x = cv(c, h, w, 384, 1)
        b3 = cv(*x, 384, (1, 3), padding=(0, 1))[0] + cv(*x, 384, (3, 1), padding=(1, 0))[0]
        x = cv(*cv(c, h, w, 448, 1), 384, 3, padding=1)
        b3d = cv(*x, 384, (1, 3), padding=(0, 1))[0] + cv(*x, 384, (3, 1), padding=(1, 0))[0]
        c = b1 + b3 + b3d + pool_branch(c, h, w, 192)
    c, h, w = net.global_pool(c, h, w)
    net.dense(n, 1000, c)
    return net


# ------------------------------------------------------------------ VGG, SqueezeNet

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
VGG13 = (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M")


def vgg(cfg=tuple(VGG16), n: int = 1, image: int = 224) -> Net:
    """VGG (no BN) from its layer table: ints are 3x3 conv widths, "M" a 2x2 max pool."""
    net = Net(n)
    c, h, w = 3, image, image
    for v in cfg:
        if v == "M":
            c, h, w = net.pool("max", c, h, w, 2)
        else:
            c, h, w = net.conv(c, h, w, v, 3, padding=1)
    net.dense(n, 4096, c * h * w, act="relu")
    net.dense(n, 4096, 4096, act="relu")
    net.dense(n, 1000, 4096)
    return net


def squeezenet1_1(n: int = 1, image: int = 224) -> Net:
    """torchvision squeezenet1_1 (its ceil-mode max pools give the floor-mode sizes here
    for images that are multiples of 32)."""
    net = Net(n)
    c, h, w = net.conv(3, image, image, 64, 3, stride=2)
    c, h, w = net.pool("max", c, h, w, 3, stride=2)
    for fire in [(16, 64), (16, 64), "M", (32, 128), (32, 128), "M",
                 (48, 192), (48, 192), (64, 256), (64, 256)]:
        if fire == "M":
            c, h, w = net.pool("max", c, h, w, 3, stride=2)
            continue
        sq, ex = fire
        s = net.conv(c, h, w, sq, 1)
        c = net.conv(*s, ex, 1)[0] + net.conv(*s, ex, 3, padding=1)[0]
    c, h, w = net.conv(c, h, w, 1000, 1)                                     # classifier conv
    net.global_pool(c, h, w)
    return net
