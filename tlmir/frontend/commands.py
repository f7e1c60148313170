"""`tlmir import`: the tasks a PyTorch model gives. Imports torch only when it runs."""
from __future__ import annotations


def cmd_import(args) -> None:
    import json

    from . import import_model
    from .models import load
    module, inputs, name = load(args.model, args.input)
    imported = import_model(module, inputs, name)
    if args.json:
        print(json.dumps({"model": name, "tasks": [
            {"name": t.name, "key": t.key, "count": w, "flops": t.flops} for t, w in imported.tasks()],
            "fallbacks": imported.fallbacks()}))
    else:
        print(imported.describe())


def add_parsers(sub) -> None:
    im = sub.add_parser("import", help="import a PyTorch model and list the tlmir tasks it gives")
    im.add_argument("model", metavar="SPEC",
                    help="zoo:NAME (resnet18/34/50/101, resnext50_32x4d, wide_resnet50_2, "
                         "mobilenet_v2, vgg11/16, vgg16_bn, densenet121, inception_v3, squeezenet1_1, "
                         "dcgan_generator, llama_decoder_layer) or transformers:NAME (bert-base, "
                         "bert-large, bert-tiny, gpt2, gpt2-tiny, llama-7b-layer, llama-tiny), random weights")
    im.add_argument("--input", required=True, metavar="SHAPE",
                    help="input shape: 1,3,224,224 for an image model, batch,seq for transformers")
    im.add_argument("--json", action="store_true", help="print one JSON object")
    im.set_defaults(fn=cmd_import)
