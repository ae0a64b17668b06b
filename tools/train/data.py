"""Tokenizer and training data of pagoda-tiny.

Tokenizer: byte-level BPE (GPT-2 pre-tokenizer regex, `tokenizers` library) trained on the two
corpora, with every merge that would make a token holding a digit removed: numbers are spelt
one digit per token (" 12345" -> "Ġ", "1", "2", "3", "4", "5"), so copying a pass key is the
same task whatever its digits. Id 0 is <|endoftext|> (BOS = EOS); ids 1..256 the byte alphabet.

Retrieval documents are built token by token exactly as `pagoda eval retrieval` builds its
prompts (src/eval/kv_eval.cc, Retrieval): BOS, the filler sentence encoded once and repeated,
the needle at a random filler boundary, the question; the answer (" 12345.") follows and is
what the loss weights. Variations: story text as filler instead of the repeated sentence, and
several key-value pairs (named secret numbers) with a question about one of them.
"""
from __future__ import annotations

import json
import re

import numpy as np

EOT = "<|endoftext|>"

# The strings of src/eval/kv_eval.cc (Retrieval).
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = " What is the pass key? The pass key is"


def needle_text(key: str) -> str:
    return " The pass key is " + key + ". Remember it. " + key + " is the pass key."


NAMES = ["apple", "river", "tiger", "candle", "mirror", "garden", "rocket", "violin", "pepper",
         "island", "dragon", "marble", "forest", "button", "castle", "pencil"]

CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
                 "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def read_documents(stories_path: str, shakespeare_path: str):
    """(held-out story documents, training documents). The held-out ones are the first 400
    stories of the file, so `pagoda eval perplexity --data tinystories-first2MiB.txt
    --max-tokens N` (which reads from the start) scores text the model never saw."""
    stories = [d.strip() for d in open(stories_path, encoding="utf-8").read().split(EOT)]
    stories = [d for d in stories if d]
    held_out, train = stories[:400], stories[400:]
    text = open(shakespeare_path, encoding="utf-8").read()
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    plays = []  # documents of ~2 KB of consecutive speeches
    cur = ""
    for p in paras:
        cur = (cur + "\n\n" + p) if cur else p
        if len(cur) > 2000:
            plays.append(cur)
            cur = ""
    if cur:
        plays.append(cur)
    return held_out, train + plays


def train_tokenizer(docs, vocab_size: int = 4096):
    """Returns the tokenizer.json text (a `tokenizers` BPE with the digit merges removed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + 1024, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, min_frequency=2)
    tok.train_from_iterator(docs, trainer)
    j = json.loads(tok.to_str())
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in j["model"]["merges"]]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    assert len(alphabet) == 256
    vocab = {EOT: 0}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    kept = []
    for a, b in merges:
        if len(vocab) >= vocab_size:
            break
        t = a + b
        if any(ch.isdigit() for ch in t) or t in vocab:
            continue
        assert a in vocab and b in vocab, (a, b)
        vocab[t] = len(vocab)
        kept.append([a, b])
    assert len(vocab) == vocab_size, len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = kept
    j["added_tokens"] = [{"id": 0, "content": EOT, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}]
    # BOS before every encoded text (as the GGUF's add_bos_token = true).
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": EOT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": EOT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": EOT, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {EOT: {"id": EOT, "ids": [0], "tokens": [EOT]}},
    }
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return json.dumps(j, ensure_ascii=False)


def load_tokenizer(path: str):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


class Encoder:
    """Plain encoding (no BOS), as kv_eval.cc's EncodeOptions{add_special_tokens = false}."""

    def __init__(self, tok):
        self.tok = tok
        self.bos = 0

    def __call__(self, text: str) -> np.ndarray:
        return np.array(self.tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def many(self, texts):
        return [np.array(e.ids, dtype=np.int32) for e in self.tok.encode_batch(texts, add_special_tokens=False)]


def corpus_stream(enc: Encoder, docs) -> np.ndarray:
    """BOS + doc + BOS + doc ... (as CorpusStream in src/eval/kv_eval.cc)."""
    parts = []
    for ids in enc.many(docs):
        parts.append(np.array([enc.bos], dtype=np.int32))
        parts.append(ids)
    return np.concatenate(parts)


def retrieval_prompt(enc: Encoder, filler: np.ndarray, question: np.ndarray, key: str, context: int, rng):
    """kv_eval.cc's Retrieval prompt for one key (depth drawn from rng)."""
    needle = enc(needle_text(key))
    budget = max(context - 1 - len(needle) - len(question), 0)
    reps = budget // len(filler)
    depth = int(rng.integers(0, reps + 1))
    parts = [np.array([enc.bos], dtype=np.int32)]
    parts += [filler] * depth + [needle] + [filler] * (reps - depth) + [question]
    return np.concatenate(parts)


def random_key(rng) -> str:
    r = rng.random()
    if r < 0.8:
        return str(10000 + int(rng.integers(0, 90000)))  # kv_eval.cc's range
    n = int(rng.integers(3, 8))
    return str(int(rng.integers(1, 10))) + "".join(str(int(d)) for d in rng.integers(0, 10, n - 1))


class Sampler:
    """Rows of L + 1 tokens with per-target loss weights."""

    def __init__(self, enc: Encoder, stream: np.ndarray, seed: int, answer_weight: float = 10.0,
                 tail: str = "text", story_filler_weight: float = 1.0):
        self.enc = enc
        self.stream = stream
        self.rng = np.random.default_rng(seed)
        self.filler = enc(FILLER)
        self.question = enc(QUESTION)
        self.answer_weight = answer_weight
        self.tail = tail  # what fills a row after a retrieval document: "text" or "filler"
        self.story_filler_weight = story_filler_weight

    def text(self, n: int) -> np.ndarray:
        o = int(self.rng.integers(0, len(self.stream) - n))
        row = self.stream[o:o + n].copy()
        row[0] = self.enc.bos
        return row

    def story_filler(self, n: int) -> np.ndarray:
        row = self.text(n)[1:]
        return row[row != self.enc.bos] if self.rng.random() < 0.5 else row

    def retrieval_doc(self, context: int):
        """(prompt ids, answer ids) of one document of about `context` tokens."""
        rng = self.rng
        kind = rng.random()
        key = random_key(rng)
        answer = self.enc(" " + key + ".")
        if kind < 0.6:  # exactly what pagoda eval retrieval builds
            return retrieval_prompt(self.enc, self.filler, self.question, key, context, rng), answer
        if kind < 0.8:  # story text as filler, needle at a random token boundary (self.story = True)
            needle = self.enc(needle_text(key))
            n = max(context - 1 - len(needle) - len(self.question), 1)
            filler = self.story_filler(n + 1)[:n]
            d = int(rng.integers(0, len(filler) + 1))
            ids = np.concatenate([[self.enc.bos], filler[:d], needle, filler[d:], self.question]).astype(np.int32)
            self.story = True
            return ids, answer
        # several named secret numbers in the repeated filler; ask for one
        k = int(rng.integers(2, 7))
        names = rng.choice(NAMES, size=k, replace=False)
        keys = [key] + [random_key(rng) for _ in range(k - 1)]
        needles = [self.enc(f" The secret number of the {nm} is {kk}.") for nm, kk in zip(names, keys)]
        ask = int(rng.integers(0, k))
        q = self.enc(f" What is the secret number of the {names[ask]}? The secret number of the {names[ask]} is")
        answer = self.enc(" " + keys[ask] + ".")
        budget = max(context - 1 - sum(len(x) for x in needles) - len(q), 0)
        reps = budget // len(self.filler)
        depths = sorted(int(x) for x in rng.integers(0, reps + 1, size=k))
        order = rng.permutation(k)
        parts = [np.array([self.enc.bos], dtype=np.int32)]
        j = 0
        for i in range(reps + 1):
            while j < k and depths[j] == i:
                parts.append(needles[order[j]])
                j += 1
            if i < reps:
                parts.append(self.filler)
        parts.append(q)
        return np.concatenate(parts), answer

    def row(self, L: int, retrieval_prob: float):
        """(ids [L + 1], weights [L]: the weight of predicting ids[t + 1] from ids[: t + 1])."""
        w = np.ones(L, dtype=np.float32)
        if self.rng.random() >= retrieval_prob:
            return self.text(L + 1), w
        lo = max(L // 2, 64)
        self.story = False
        for _ in range(8):
            context = int(self.rng.integers(lo, L - 8 + 1))
            prompt, answer = self.retrieval_doc(context)
            if len(prompt) + len(answer) <= L + 1:
                break
        n = len(prompt) + len(answer)
        m = L + 1 - n
        if m <= 0:
            tail = np.zeros(0, np.int32)
        elif self.tail == "text":
            tail = self.text(m + 1)[:m]
        else:
            tail = np.tile(self.filler, m // len(self.filler) + 1)[:m]
        row = np.concatenate([prompt, answer, tail]).astype(np.int32)[: L + 1]
        a0 = len(prompt) - 1  # target index of the first answer token
        if self.story:
            w[:a0] = self.story_filler_weight
        w[a0:a0 + len(answer)] = self.answer_weight
        return row, w

    def batch(self, B: int, L: int, retrieval_prob: float):
        rows, ws = zip(*(self.row(L, retrieval_prob) for _ in range(B)))
        return np.stack(rows), np.stack(ws)
