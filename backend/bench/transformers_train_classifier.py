"""Reference timing for classifier fine-tuning: Hugging Face transformers on PyTorch (CPU or CUDA).

Reads a JSON request on stdin: {"model_dir", "texts", "labels" (ids), "num_labels",
"batch_size", "max_len", "steps", "lr", "weight_decay", "warmup", "max_grad_norm", "threads",
"device", "seed", "autocast_bf16"}, fine-tunes BertForSequenceClassification (pooler over [CLS], then a linear
layer: Flipside's default head) as `flipside classifier train` does: AdamW with weight decay on
every parameter, linear warm-up and decay, gradient clipping; step i trains on the i-th
`batch_size` texts, padded to the longest (the caller hands the texts over in the order of the
batches to train). With "autocast_bf16" the forward pass runs under
`torch.autocast("cpu", torch.bfloat16)` (linear layers and matrix products in bf16, weights and
optimizer in f32). The first step is a warm-up and is not timed. Prints a JSON result on stdout.
"""

import json
import sys
import time

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main():
    request = json.load(sys.stdin)
    torch.set_num_threads(request["threads"])
    torch.manual_seed(request["seed"])
    device = torch.device(request["device"])
    tokenizer = AutoTokenizer.from_pretrained(request["model_dir"])
    model = AutoModelForSequenceClassification.from_pretrained(
        request["model_dir"], num_labels=request["num_labels"]
    ).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=request["lr"], eps=1e-8,
                                  weight_decay=request["weight_decay"])
    steps, batch = request["steps"], request["batch_size"]
    warmup = round(request["warmup"] * steps)

    def learning_rate(step):
        if step < warmup:
            return request["lr"] * (step + 1) / warmup
        return request["lr"] * max(0.0, (steps - step) / max(1, steps - warmup))

    def train_step(step):
        start = (step * batch) % len(request["texts"])
        texts = request["texts"][start:start + batch]
        targets = request["labels"][start:start + batch]
        encoded = tokenizer(texts, padding=True, truncation=True,
                            max_length=request["max_len"], return_tensors="pt").to(device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        with torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=request.get("autocast_bf16", False)):
            loss = model(**encoded, labels=torch.tensor(targets, device=device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), request["max_grad_norm"])
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()  # waits for the GPU

    losses = [train_step(0)]  # warm-up
    start = time.perf_counter()
    losses += [train_step(step) for step in range(1, steps)]
    seconds = time.perf_counter() - start
    print(json.dumps({
        "seconds": seconds,
        "timed_steps": steps - 1,
        "seconds_per_step": seconds / max(1, steps - 1),
        "losses": losses,
        "torch": f"{torch.__version__}, {torch.backends.cpu.get_cpu_capability()} kernels",
        "threads": torch.get_num_threads(),
        "device": str(device),
    }))


if __name__ == "__main__":
    main()
