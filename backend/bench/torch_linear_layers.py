"""Reference timing for `flipside bench matmul`: PyTorch's F.linear on the encoder's layer shapes.

Reads a JSON request on stdin: {"shapes": [[inputs, outputs], ...], "rows", "passes", "threads",
"device"}; times `passes` passes through one F.linear per shape (a rows x inputs activation, an
outputs x inputs weight and a bias, as BERT's nn.Linear holds them) after one untimed pass, and
prints a JSON result on stdout.
"""

import json
import sys
import time

import torch
import torch.nn.functional as F


def main():
    request = json.load(sys.stdin)
    torch.set_num_threads(request["threads"])
    device = request["device"]
    rows = request["rows"]
    layers = [
        (
            torch.randn(rows, inputs, device=device) * 0.02,
            torch.randn(outputs, inputs, device=device) * 0.02,
            torch.zeros(outputs, device=device),
        )
        for inputs, outputs in request["shapes"]
    ]

    def one_pass():
        for x, weight, bias in layers:
            F.linear(x, weight, bias)
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        one_pass()
        start = time.perf_counter()
        for _ in range(request["passes"]):
            one_pass()
        seconds = time.perf_counter() - start
    torch_version = f"{torch.__version__}, {torch.backends.cpu.get_cpu_capability()} kernels"
    print(json.dumps({"seconds": seconds, "torch": torch_version, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
