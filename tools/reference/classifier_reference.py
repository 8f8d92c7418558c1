"""Reference for Flipside's sequence classifiers: tiny random Hugging Face checkpoints of the
three families `--classifier` reads (BERT, RoBERTa, DistilBERT), and their probabilities.

`make OUT_DIR` builds, with `transformers` and `tokenizers` only, one tiny random checkpoint per
family (`BertForSequenceClassification`, `RobertaForSequenceClassification`,
`DistilBertForSequenceClassification`), each with its own small trained tokenizer, saves them as
Hugging Face directories (config.json, model.safetensors, tokenizer.json) under OUT_DIR/<family>/,
and writes OUT_DIR/probabilities.json: the label probabilities `transformers` computes for a
padded batch of texts (and of text pairs). Flipside's test loads the same directories and must
match to 1e-4. Run once; the outputs are committed (about 0.3 MB, random weights):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers
    /tmp/ref/bin/python tools/reference/classifier_reference.py make tests/fixtures/hf-classifiers

`check DIR TEXT…` loads a classifier directory Flipside trained with
`AutoModelForSequenceClassification` and `AutoTokenizer` (no custom code) and prints each
text's label probabilities as JSON, to compare with `flipside classifier predict`.
"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForSequenceClassification,
)

CORPUS = [
    "the acting was superb and the plot was gripping",
    "a dull film with wooden dialogue and a boring story",
    "I loved the music but the ending was terrible",
    "an excellent cast makes this moving story shine",
    "the script is clumsy, the jokes are painful and nothing works",
    "what a delightful surprise this movie turned out to be",
    "two dogs run through a snowy field",
    "a man is playing a guitar on stage",
]
TEXTS = [
    "the acting was superb",
    "a boring story",
    "I loved the music but the ending was terrible and the plot was dull",
    "x",
]
PAIRS = [
    ("a man is playing a guitar on stage", "a man is performing music"),
    ("two dogs run through a snowy field", "the animals are asleep"),
]
LABELS = ["negative", "positive"]


def wordpiece_tokenizer():
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=special)
    )
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tokenizer, dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def byte_bpe_tokenizer():
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tokenizer, dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", cls_token="<s>", sep_token="</s>", mask_token="<mask>")


def build(family):
    torch.manual_seed({"bert": 1, "roberta": 2, "distilbert": 3}[family])
    labels = dict(id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)})
    if family == "roberta":
        tokenizer, special = byte_bpe_tokenizer()
        config = RobertaConfig(
            vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=66,
            type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
            initializer_range=0.3, **labels,
        )
        model = RobertaForSequenceClassification(config)
    elif family == "distilbert":
        tokenizer, special = wordpiece_tokenizer()
        config = DistilBertConfig(
            vocab_size=tokenizer.get_vocab_size(), dim=32, n_layers=2, n_heads=4, hidden_dim=64,
            max_position_embeddings=64, initializer_range=0.3, **labels,
        )
        model = DistilBertForSequenceClassification(config)
    else:
        tokenizer, special = wordpiece_tokenizer()
        config = BertConfig(
            vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
            initializer_range=0.3, **labels,
        )
        model = BertForSequenceClassification(config)
    return model.eval(), PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)


def probabilities(model, tokenizer, texts, pairs=None):
    if pairs is None:
        batch = tokenizer(texts, padding=True, return_tensors="pt")
    else:
        batch = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True, return_tensors="pt")
    if model.config.model_type == "distilbert":
        batch.pop("token_type_ids", None)
    with torch.no_grad():
        return torch.softmax(model(**batch).logits, dim=-1).tolist()


def make(out):
    results = {}
    for family in ["bert", "roberta", "distilbert"]:
        model, tokenizer = build(family)
        directory = os.path.join(out, family)
        model.save_pretrained(directory, safe_serialization=True)
        tokenizer.backend_tokenizer.save(os.path.join(directory, "tokenizer.json"))
        # The probabilities come from the saved directory as transformers loads it back.
        reloaded = AutoModelForSequenceClassification.from_pretrained(directory).eval()
        tokenizer = AutoTokenizer.from_pretrained(directory)
        results[family] = {
            "texts": TEXTS,
            "probabilities": probabilities(reloaded, tokenizer, TEXTS),
        }
        if family == "bert":
            results[family]["pairs"] = PAIRS
            results[family]["pair_probabilities"] = probabilities(reloaded, tokenizer, None, PAIRS)
    with open(os.path.join(out, "probabilities.json"), "w") as f:
        json.dump(results, f, indent=1)


def check(directory, texts):
    model = AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    print(json.dumps({
        "class": type(model).__name__,
        "labels": [model.config.id2label[i] for i in range(model.config.num_labels)],
        "probabilities": probabilities(model, tokenizer, texts),
    }))


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        make(sys.argv[2])
    elif sys.argv[1:2] == ["check"]:
        check(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
