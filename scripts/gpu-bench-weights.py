"""MiniLM's weights for a size-limited transfer (scripts/gpu-bench --int8-weights).

pack SRC DST:  matrices of at least 384 x 384 (not the position embeddings) as int8 rows with an
               f32 scale per row (max |w| / 127), every other float tensor as f16.
widen SRC DST: back to f32 safetensors that Flipside and sentence-transformers both read.
"""

import sys

import torch
from safetensors.torch import load_file, save_file


def pack(weights):
    packed = {}
    for name, w in weights.items():
        if w.dim() == 2 and w.numel() >= 384 * 384 and "position" not in name:
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            packed[name + ".q"] = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
            packed[name + ".scale"] = scale.squeeze(1).float()
        elif w.dtype.is_floating_point:
            packed[name] = w.half()
        else:
            packed[name] = w
    return packed


def widen(packed):
    weights = {}
    for name, w in packed.items():
        if name.endswith(".q"):
            base = name[: -len(".q")]
            weights[base] = w.float() * packed[base + ".scale"].unsqueeze(1)
        elif name.endswith(".scale"):
            continue
        else:
            weights[name] = w.float() if w.dtype == torch.float16 else w
    return weights


def main():
    mode, src, dst = sys.argv[1:4]
    convert = {"pack": pack, "widen": widen}[mode]
    tensors = {k: v.contiguous() for k, v in convert(load_file(src)).items()}
    save_file(tensors, dst, metadata={"format": "pt"})


if __name__ == "__main__":
    main()
