"""Reference timing for `flipside bench dis-ae`: LASS's Dis-AE trained in PyTorch on CPU, the
architecture of `shared/src/models/dis_ae` written as a PyTorch user would (a bidirectional
`nn.LSTM` over packed sequences, an `nn.LSTM` decoder, losses as in `dis_ae/loss.rs`).

A copying Dis-AE (`config.copy`) also encodes each text's masked copy ("content": the ids with
its opinion words masked) and attends to those states after each decoder step.

Reads a JSON request on stdin: {"weights" (Flipside's initial model.safetensors), "config"
(Flipside's DisAeConfig), "batches" (each: "sides" — one {"ids", "content", "classes"} for the corpus-first
stage, two for pairs — and the step's "lr", "alpha", "beta", "gamma"), "max_grad_norm",
"threads"}. Trains with AdamW (eps 1e-8, no weight decay) and global-norm clipping, timing each
step, and prints a JSON result: the seconds of every step, the first step's loss, and the CPU
and wall seconds of the whole loop.
"""

import json
import math
import resource
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class AttentionPool(nn.Module):
    def __init__(self, d_states, d_out):
        super().__init__()
        self.state = nn.Linear(d_states, d_states)
        self.query = nn.Linear(d_states, d_states, bias=False)
        self.score = nn.Linear(d_states, 1, bias=False)
        self.project = nn.Linear(d_states, d_out)

    def forward(self, states, mask, query):
        keys = self.state(states) + self.query(query)[:, None, :]
        scores = self.score(torch.tanh(keys)).squeeze(2).masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, 1)[:, :, None]
        return self.project((states * weights).sum(1))


class CopyAttention(nn.Module):
    """Luong's general attention over the masked content's states, scaled by sqrt(d)."""

    def __init__(self, d_memory, d_decoder):
        super().__init__()
        self.key = nn.Linear(d_memory, d_decoder, bias=False)
        self.combine = nn.Linear(d_decoder + d_memory, d_decoder)

    def forward(self, hidden, memory, mask):
        scores = hidden @ self.key(memory).transpose(1, 2) / math.sqrt(hidden.shape[2])
        scores = scores.masked_fill(mask[:, None, :] == 0, float("-inf"))
        context = torch.softmax(scores, 2) @ memory
        return torch.tanh(self.combine(torch.cat([hidden, context], 2)))


class DisAe(nn.Module):
    def __init__(self, c):
        super().__init__()
        labels = len(c["labels"])
        self.embedding = nn.Embedding(c["vocab_size"], c["d_embed"])
        self.encoder = nn.LSTM(c["d_embed"], c["d_encoder"], batch_first=True, bidirectional=True)
        states = 2 * c["d_encoder"]
        self.sentiment_head = AttentionPool(states, c["d_latent"])
        self.content_head = AttentionPool(states, c["d_latent"])
        self.classifier = nn.Linear(c["d_latent"], labels)
        self.label_vectors = nn.Parameter(torch.zeros(labels, c["d_latent"]))
        self.initial_state = nn.Linear(2 * c["d_latent"], 2 * c["d_decoder"])
        self.decoder = nn.LSTM(c["d_embed"] + 2 * c["d_latent"], c["d_decoder"], batch_first=True)
        self.copy = CopyAttention(states, c["d_decoder"]) if c.get("copy") else None
        self.output = nn.Linear(c["d_decoder"], c["d_embed"])
        self.output_bias = nn.Parameter(torch.zeros(c["vocab_size"]))

    def load_flipside(self, path):
        """Flipside's weights: its fused LSTMs carry one bias (the input transform's)."""
        theirs = load_file(path)
        ours = {}
        lstms = {"forward_lstm": ("encoder", "_l0"), "backward_lstm": ("encoder", "_l0_reverse"),
                 "decoder": ("decoder", "_l0")}
        for key, value in theirs.items():
            parts = key.split(".")
            if parts[0] in lstms:
                module, suffix = lstms[parts[0]]
                kind = "ih" if parts[1] == "input" else "hh"
                ours[f"{module}.{parts[2]}_{kind}{suffix}"] = value
            else:
                ours[key] = value
        for module, suffix in lstms.values():
            hidden = ours[f"{module}.weight_hh{suffix}"]
            ours[f"{module}.bias_hh{suffix}"] = torch.zeros(hidden.shape[0])
        self.load_state_dict(ours, strict=True)

    def states(self, ids, mask, lengths):
        packed = pack_padded_sequence(self.embedding(ids), lengths, batch_first=True,
                                      enforce_sorted=False)
        states, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True,
                                        total_length=ids.shape[1])
        m = mask[:, :, None]
        return states, (states * m).sum(1) / m.sum(1).clamp_min(1e-9)

    def encode(self, ids, mask, lengths, content):
        """The sentiment vector, the content vector and (copying) the content's memory and its
        mask; `content` is the masked copy's (ids, mask, lengths)."""
        states, pooled = self.states(ids, mask, lengths)
        sentiment = self.sentiment_head(states, mask, pooled)
        if self.copy is None:
            return sentiment, self.content_head(states, mask, pooled), None, mask
        content_ids, content_mask, content_lengths = content
        masked, masked_pooled = self.states(content_ids, content_mask, content_lengths)
        return (sentiment, self.content_head(masked, content_mask, masked_pooled), masked,
                content_mask)

    def latent(self, sentiment, content):
        mixed = torch.softmax(self.classifier(sentiment), 1) @ self.label_vectors
        return torch.cat([mixed, content], 1)

    def reconstruction(self, latent, memory, memory_mask, ids, mask):
        inputs, targets, target_mask = ids[:, :-1], ids[:, 1:], mask[:, 1:]
        hidden, cell = torch.tanh(self.initial_state(latent)).chunk(2, 1)
        fed = latent[:, None, :].expand(-1, inputs.shape[1], -1)
        states, _ = self.decoder(torch.cat([self.embedding(inputs), fed], 2),
                                 (hidden[None].contiguous(), cell[None].contiguous()))
        if self.copy is not None:
            states = self.copy(states, memory, memory_mask)
        logits = self.output(states) @ self.embedding.weight.T + self.output_bias
        nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return (nll.view_as(target_mask) * target_mask).sum() / ids.shape[0]


def neutrality(logits):
    return (torch.logsumexp(logits, 1) - logits.mean(1) - math.log(logits.shape[1])).mean()


def label_term(model):
    classes = model.label_vectors.shape[0]
    return F.cross_entropy(model.classifier(model.label_vectors), torch.arange(classes)) * classes


def cosine(a, b):
    norms = ((a * a).sum(1) * (b * b).sum(1)).sqrt().clamp_min(1e-8)
    return (a * b).sum(1) / norms


def tensors(side, pad_id):
    """(ids, mask, lengths, the masked copy's (ids, mask, lengths), classes) of a side, each
    masked copy (one mask per opinion word: shorter) padded to its text's width."""
    width = max(len(r) for r in side["ids"])

    def padded(rows):
        lengths = torch.tensor([len(r) for r in rows])
        mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
        return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows]), mask, lengths

    ids, mask, lengths = padded(side["ids"])
    content = padded(side["content"]) if side["content"][0] is not None else (ids, mask, lengths)
    return ids, mask, lengths, content, torch.tensor(side["classes"])


def loss(model, batch, pad_id):
    sides = [tensors(side, pad_id) for side in batch["sides"]]
    # Each side's (sentiment, content, memory, the memory's mask).
    encoded = [model.encode(*side[:4]) for side in sides]
    emotion = label_term(model)
    for (sentiment, content, _, _), side in zip(encoded, sides):
        emotion = emotion + F.cross_entropy(model.classifier(sentiment), side[4])
        emotion = emotion + neutrality(model.classifier(content))

    def rebuild(sentiment, content_of, side):
        """Decodes `side`'s text from `sentiment` and the content (and memory) of `content_of`."""
        _, content, memory, memory_mask = content_of
        return model.reconstruction(model.latent(sentiment, content), memory, memory_mask,
                                    side[0], side[1])

    rebuilt = sum(rebuild(e[0], e, side) for e, side in zip(encoded, sides))
    total = rebuilt + batch["alpha"] * emotion
    if len(sides) == 2:
        a, b = encoded
        distance = (cosine(a[0], b[0]) - cosine(a[1], b[1]) + 2.0).mean()
        counterfactual = rebuild(a[0], b, sides[0]) + rebuild(b[0], a, sides[1])
        total = total + batch["beta"] * distance + batch["gamma"] * counterfactual
    return total


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    request = json.load(sys.stdin)
    torch.set_num_threads(request["threads"])
    torch.manual_seed(0)
    config = request["config"]
    model = DisAe(config)
    model.load_flipside(request["weights"])
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, weight_decay=0.0, eps=1e-8)
    step_seconds, first_loss = [], None
    cpu_before, wall_before = cpu_seconds(), time.perf_counter()
    for batch in request["batches"]:
        started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = batch["lr"]
        optimizer.zero_grad(set_to_none=True)
        value = loss(model, batch, config["pad_id"])
        value_item = value.item()
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), request["max_grad_norm"])
        optimizer.step()
        step_seconds.append(time.perf_counter() - started)
        if first_loss is None:
            first_loss = value_item
    print(json.dumps({
        "step_seconds": step_seconds,
        "first_loss": first_loss,
        "cpu_seconds": cpu_seconds() - cpu_before,
        "wall_seconds": time.perf_counter() - wall_before,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
