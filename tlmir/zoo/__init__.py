"""A model zoo in plain torch.nn: torchvision's classifiers and two generative models.

Why it exists: the torchvision wheels available here are CUDA builds that cannot be
imported beside the CPU torch. These are the same architectures, written from
torchvision's published structure: same module names, parameter shapes and eval-mode
forward, so torch.export gives the same operator graph. Weights are random (nothing is
downloaded).

    model = zoo.get("resnet50").eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 224, 224),))

Importing this package imports torch; `import tlmir` does not import it.
"""
from __future__ import annotations

from typing import Any, Callable

import torch.nn as nn

from ..errors import FrontendError
from .cnn import (densenet121, mobilenet_v2, resnet18, resnet34, resnet50, resnet101,
                  resnext50_32x4d, squeezenet1_1, vgg11, vgg16, vgg16_bn, wide_resnet50_2)
from .generative import dcgan_generator, llama_decoder_layer
from .inception import inception_v3

MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
    "resnext50_32x4d": resnext50_32x4d,
    "wide_resnet50_2": wide_resnet50_2,
    "mobilenet_v2": mobilenet_v2,
    "vgg11": vgg11,
    "vgg16": vgg16,
    "vgg16_bn": vgg16_bn,
    "densenet121": densenet121,
    "inception_v3": inception_v3,
    "squeezenet1_1": squeezenet1_1,
    "dcgan_generator": dcgan_generator,
    "llama_decoder_layer": llama_decoder_layer,
}

__all__ = ["MODELS", "get", *MODELS]


def get(name: str, **kwargs: Any) -> nn.Module:
    """Build the named model with random weights (keyword arguments go to its builder)."""
    if name not in MODELS:
        raise FrontendError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    return MODELS[name](**kwargs)
