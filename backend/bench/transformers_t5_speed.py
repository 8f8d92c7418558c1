"""Reference timing for `flipside bench infiller`: T5 training and sampling with transformers on
PyTorch CPU.

Reads a JSON request on stdin: {"model_dir", "batches" (lists of [input ids, target ids]),
"warm_up", "lr", "threads", "generate" (input id lists), "max_new_tokens"}. Trains the T5 in
model_dir with AdamW on the batches (padded as Flipside pads them: inputs and targets to the
longest of the batch, padding ignored by the loss), timing every batch after the first
`warm_up`, then samples each generate input (nucleus p 0.9, temperature 0.7) one at a time,
and prints a JSON result: seconds, real tokens trained, the first batch's loss, generation
seconds.
"""

import json
import sys
import time

import torch
from transformers import T5ForConditionalGeneration


def padded(rows, value):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def main():
    request = json.load(sys.stdin)
    torch.set_num_threads(request["threads"])
    torch.manual_seed(0)
    model = T5ForConditionalGeneration.from_pretrained(request["model_dir"])
    model.config.dropout_rate = 0.0
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=request["lr"], weight_decay=0.01, eps=1e-8)
    first_loss = None
    seconds = 0.0
    tokens = 0
    for step, batch in enumerate(request["batches"]):
        inputs = [pair[0] for pair in batch]
        targets = [pair[1] for pair in batch]
        input_ids = padded(inputs, 0)
        attention_mask = (padded([[1] * len(r) for r in inputs], 0)).long()
        labels = padded(targets, -100)
        started = time.perf_counter()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        elapsed = time.perf_counter() - started
        if first_loss is None:
            first_loss = loss.item()
        if step >= request["warm_up"]:
            seconds += elapsed
            tokens += sum(len(r) for r in inputs) + sum(len(r) for r in targets)
    model.eval()
    started = time.perf_counter()
    with torch.no_grad():
        for ids in request["generate"]:
            model.generate(
                input_ids=torch.tensor([ids]), do_sample=True, top_p=0.9, temperature=0.7,
                max_new_tokens=request["max_new_tokens"], pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0,
            )
    generate_seconds = time.perf_counter() - started
    print(json.dumps({
        "seconds": seconds,
        "tokens": tokens,
        "first_loss": first_loss,
        "generate_seconds": generate_seconds,
        "torch": f"{torch.__version__}, {torch.backends.cpu.get_cpu_capability()} kernels",
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
