"""Reference for Flipside's T5: tiny random Hugging Face checkpoints of T5 v1.0 and v1.1, and
what `transformers` computes with them.

No T5 weights exist in any package reachable from these machines, so the parity check makes its
own. `make OUT_DIR` builds, with `transformers` only, four tiny random `T5ForConditionalGeneration`
checkpoints:

- `v1_0`: ReLU feed-forward, output tied to the embedding (rescaled by d_model^-0.5), 2 encoder
  and 3 decoder layers, 32 buckets / max distance 128;
- `v1_1`: gated-GELU feed-forward, untied `lm_head`, 16 buckets / max distance 32 (so that the
  logarithmic buckets and their cap are reached within 20 decoder positions);
- `v1_1_as_saved`: `v1_1`'s shape as `transformers` >= 5 saves it, config untouched:
  `tie_word_embeddings: true` with `scale_decoder_outputs: false`, no `lm_head.weight` (the
  output is the embedding, not rescaled);
- `v1_1_own_head_as_saved`: the same config with an `lm_head.weight` of its own (a flan-t5
  saved by `transformers` >= 5), which `transformers` uses although the config says tied.
`v1_0` and `v1_1` have their configs rewritten to the older convention (`tie_word_embeddings`
false for an own head, meaning "do not rescale");

with every RMS-norm weight randomised too, saves each as a Hugging Face directory
(`config.json`, `model.safetensors`) under OUT_DIR/<version>/, reloads it from disk, and writes
OUT_DIR/<version>/reference.json: for a padded batch of 3 inputs (lengths 14, 9, 5) and 20-token
targets, the encoder's last hidden states and the decoder's log-probabilities over the
vocabulary (teacher forcing), and the ids greedy and 4-beam search generate (12 tokens, ids 0,
5 and 7 banned). Flipside's test must match them to 1e-4. Run once; the outputs are
committed (about 1.2 MB, random weights):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers
    /tmp/ref/bin/python tools/reference/t5_reference.py make tests/fixtures/hf-t5

`check DIR` loads a T5 directory (one Flipside saved, say) with `T5ForConditionalGeneration` and
prints the same batch's log-probabilities' checksum and the first values, to compare with the
reference of the checkpoint it was made from.
"""

import json
import os
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

VOCAB = 256
SOURCE_LENGTHS = [14, 9, 5]
TARGET_LENGTH = 20
GENERATED = 12

# T5 v1.1's shape: gated-GELU, its own head (untied), buckets reached within 20 positions.
V1_1 = dict(
    d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2, num_decoder_layers=2,
    feed_forward_proj="gated-gelu", tie_word_embeddings=False,
    relative_attention_num_buckets=16, relative_attention_max_distance=32,
)

VERSIONS = {
    "v1_0": dict(
        d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=3,
        feed_forward_proj="relu", tie_word_embeddings=True,
        relative_attention_num_buckets=32, relative_attention_max_distance=128,
    ),
    "v1_1": V1_1,
    # A v1.1-style model as transformers >= 5 saves it: the config says tie_word_embeddings
    # true (always) and scale_decoder_outputs false; the head is the embedding, not stored.
    "v1_1_as_saved": V1_1,
    # The same with its own head (a flan-t5 saved by transformers >= 5): the config says tied,
    # the weights hold lm_head.weight, and transformers uses it.
    "v1_1_own_head_as_saved": V1_1,
}

# The versions whose saved config is rewritten to the older convention (tie_word_embeddings
# false for an own head, meaning "do not rescale").
OLDER_CONVENTION = {"v1_0", "v1_1"}
# The versions with a head of their own.
OWN_HEAD = {"v1_1", "v1_1_own_head_as_saved"}


def batch():
    """The padded batch every check uses: deterministic ids, `</s>` (1) closing each input."""
    generator = torch.Generator().manual_seed(7)
    width = max(SOURCE_LENGTHS)
    input_ids = torch.zeros(len(SOURCE_LENGTHS), width, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(SOURCE_LENGTHS):
        input_ids[row, : length - 1] = torch.randint(2, VOCAB, (length - 1,), generator=generator)
        input_ids[row, length - 1] = 1
        attention_mask[row, :length] = 1
    labels = torch.randint(2, VOCAB, (len(SOURCE_LENGTHS), TARGET_LENGTH), generator=generator)
    return input_ids, attention_mask, labels


@torch.no_grad()
def outputs(model):
    input_ids, attention_mask, labels = batch()
    model.eval()
    result = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    rounded = lambda tensor: torch.round(tensor, decimals=6).tolist()
    return {
        "input_ids": input_ids.tolist(),
        "attention_mask": attention_mask.tolist(),
        "labels": labels.tolist(),
        "encoder_hidden": rounded(result.encoder_last_hidden_state),
        "log_probs": rounded(torch.log_softmax(result.logits, dim=-1)),
        "loss": result.loss.item(),
        "greedy": search(model, input_ids, attention_mask, num_beams=1),
        "beam4": search(model, input_ids, attention_mask, num_beams=4),
    }


@torch.no_grad()
def search(model, input_ids, attention_mask, num_beams):
    """Generated ids (without the start token) with tokens 0, 5 and 7 banned."""
    generated = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
        num_beams=num_beams, max_new_tokens=GENERATED, length_penalty=1.0, early_stopping=False,
        bad_words_ids=[[0], [5], [7]], eos_token_id=1, pad_token_id=0, decoder_start_token_id=0,
        use_cache=False,  # transformers 5 sizes its cache by the encoder depth (3 ≠ 2 here)
    )
    return generated[:, 1:].tolist()


def make(out_dir):
    for version, settings in VERSIONS.items():
        torch.manual_seed(11)
        config = T5Config(vocab_size=VOCAB, dropout_rate=0.0, decoder_start_token_id=0, **settings)
        model = T5ForConditionalGeneration(config)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("layer_norm.weight"):
                    parameter.copy_(0.5 + torch.rand_like(parameter))
            older = version in OLDER_CONVENTION
            if version in OWN_HEAD:
                # transformers 5 ties the head at construction; a v1.1 checkpoint's is its own.
                model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, settings["d_model"]) * 0.2)
        directory = os.path.join(out_dir, version)
        model.save_pretrained(directory)
        config_path = os.path.join(directory, "config.json")
        with open(config_path) as f:
            saved = json.load(f)
        if older:
            saved["tie_word_embeddings"] = settings["tie_word_embeddings"]
            saved.pop("scale_decoder_outputs", None)
        else:
            assert saved["tie_word_embeddings"] is True, saved
            assert saved["scale_decoder_outputs"] is False, saved
        with open(config_path, "w") as f:
            json.dump(saved, f, indent=2)
        reloaded = T5ForConditionalGeneration.from_pretrained(directory)
        tied = reloaded.lm_head.weight.data_ptr() == reloaded.shared.weight.data_ptr()
        assert tied == (version not in OWN_HEAD), version
        with open(os.path.join(directory, "reference.json"), "w") as f:
            json.dump(outputs(reloaded), f)
        print(f"{version}: {directory}")


def check(directory):
    model = T5ForConditionalGeneration.from_pretrained(directory)
    result = outputs(model)
    flat = torch.tensor(result["log_probs"]).flatten()
    print(json.dumps({"loss": result["loss"], "sum": flat.sum().item(), "first": flat[:5].tolist()}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
