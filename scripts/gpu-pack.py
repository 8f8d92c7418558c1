"""What scripts/gpu-bench needs to fit a size-limited transfer to an offline GPU machine.

cut BINARY OUT FILE...   BINARY without the bytes of each FILE it embeds verbatim (the shipped
                         models, which travel with the repository anyway): OUT holds a JSON
                         header naming each cut (offset, FILE's path, sha256) and the rest.
splice CUT ROOT OUT      the binary again, each cut filled from ROOT/path; checks the sha256s.
shapes SAFETENSORS OUT   the tensor names, dtypes and shapes of a checkpoint, as JSON.
random SHAPES OUT        a checkpoint of those names and shapes with BERT's initialisation
                         (normal, std 0.02; LayerNorm weights 1, biases 0; integer tensors
                         0, 1, 2, ... along their last axis): the same shapes launch the
                         same kernels, so speed benches need not carry the real weights.
                         Needs torch and safetensors.

cut, splice and shapes use only Python's standard library.
"""

import hashlib
import json
import struct
import sys


def cut(binary, out, files):
    data = open(binary, "rb").read()
    cuts = []
    for path in files:
        blob = open(path, "rb").read()
        at = data.find(blob)
        if len(blob) < 4096 or at < 0:
            continue
        cuts.append(
            {"offset": at, "path": path, "sha256": hashlib.sha256(blob).hexdigest(),
             "length": len(blob)}
        )
    cuts.sort(key=lambda c: c["offset"])
    rest, last = [], 0
    for c in cuts:
        if c["offset"] < last:
            sys.exit(f"error: {c['path']} overlaps another cut")
        rest.append(data[last : c["offset"]])
        last = c["offset"] + c["length"]
    rest.append(data[last:])
    header = json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "cuts": cuts}).encode()
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for part in rest:
            f.write(part)
    cut_bytes = sum(c["length"] for c in cuts)
    print(f"{binary}: {len(cuts)} embedded files cut, {cut_bytes / 1e6:.1f} of "
          f"{len(data) / 1e6:.1f} MB")


def splice(cut_file, root, out):
    with open(cut_file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        rest = f.read()
    parts, kept, original = [], 0, 0  # read up to `kept` in `rest`, `original` in the binary
    for c in header["cuts"]:
        blob = open(f"{root}/{c['path']}", "rb").read()
        if hashlib.sha256(blob).hexdigest() != c["sha256"]:
            sys.exit(f"error: {root}/{c['path']} is not the file the binary embeds")
        gap = c["offset"] - original
        parts += [rest[kept : kept + gap], blob]
        kept, original = kept + gap, c["offset"] + c["length"]
    parts.append(rest[kept:])
    data = b"".join(parts)
    if hashlib.sha256(data).hexdigest() != header["sha256"]:
        sys.exit(f"error: {out} does not match the binary that was cut")
    open(out, "wb").write(data)


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def shapes(src, out):
    header = safetensors_header(src)
    header.pop("__metadata__", None)
    table = {name: {"dtype": t["dtype"], "shape": t["shape"]} for name, t in header.items()}
    json.dump(table, open(out, "w"), indent=1)


def random(shapes_file, out):
    import torch
    from safetensors.torch import save_file

    dtypes = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
              "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8}
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, t in json.load(open(shapes_file)).items():
        if t["dtype"] not in dtypes:
            sys.exit(f"error: {name}: no random values for dtype {t['dtype']}")
        dtype, shape = dtypes[t["dtype"]], t["shape"]
        if not dtype.is_floating_point:
            if shape:
                tensor = torch.arange(shape[-1], dtype=dtype).expand(*shape)
            else:
                tensor = torch.zeros((), dtype=dtype)
        elif "LayerNorm.weight" in name or "layer_norm.weight" in name:
            tensor = torch.ones(shape, dtype=dtype)
        elif name.endswith("bias"):
            tensor = torch.zeros(shape, dtype=dtype)
        else:
            tensor = (torch.randn(shape, generator=generator) * 0.02).to(dtype)
        tensors[name] = tensor.contiguous()
    save_file(tensors, out, metadata={"format": "pt"})


def main():
    commands = {"cut": (cut, 3), "splice": (splice, 3), "shapes": (shapes, 2),
                "random": (random, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    command, arity = commands[sys.argv[1]]
    args = sys.argv[2:]
    if command is cut:
        if len(args) < 3:
            sys.exit(__doc__)
        cut(args[0], args[1], args[2:])
    elif len(args) != arity:
        sys.exit(__doc__)
    else:
        command(*args)


if __name__ == "__main__":
    main()
