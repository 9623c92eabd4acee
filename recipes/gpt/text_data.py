"""A text input pipeline with real CPU cost: byte-pair tokenization and packing on the fly.

Documents are the non-empty lines of a UTF-8 text file (generated deterministically here, or the
user's own via ``workload.data.text_path``). A small byte-pair-encoding (BPE) tokenizer is trained
once on a sample of the text to the model's ``vocab_size`` and cached beside the generated text.
Batch ``b`` is a pure function of ``b``: its documents start at a fixed stride into the corpus,
are encoded without any cache (each batch pays the full tokenization cost, like a pipeline that
tokenizes raw text as it trains), joined with an end-of-document token and cut into
``micro_batch`` rows of ``seq_len + 1`` tokens. A torch DataLoader with the configured
``num_workers``, ``pin_memory``, ``prefetch_factor`` and ``persistent_workers`` makes the
batches, so the same stream comes out whatever the loader settings.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from orchestrator.spec.config import BucketConfig, DataConfig
from recipes.gpt.config import LoaderConfig

EOS, UNK = 0, 1
_PRETOKEN = re.compile(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")
_SAMPLE_CHARS = 200_000  # tokenizer training sample
_TRAIN_WORDS = 3000  # most frequent pre-tokens the merges are learned from
_SYLLABLES = ("ka", "to", "ri", "mo", "sen", "la", "qui", "dor", "pha", "ne", "ul", "bra", "e",
              "i", "o", "st", "ing", "tion", "er", "an", "th", "ou", "ve", "al")


def cache_dir(data: DataConfig) -> Path:
    d = Path(data.cache_dir) if data.cache_dir else Path(tempfile.gettempdir()) / "throughput-orchestrator"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def generate_text(seed: int, size_bytes: int) -> str:
    """Deterministic pseudo-English: Zipf-distributed words, sentences, one document per line."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
                    for _ in range(4000)})
    rng.shuffle(words)
    cum, total = [], 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 1)
        cum.append(total)
    out: list[str] = []
    size = 0
    while size < size_bytes:
        sentences = []
        for _ in range(rng.randint(1, 6)):
            n = rng.randint(4, 18)
            sent = " ".join(rng.choices(words, cum_weights=cum, k=n))
            if rng.random() < 0.2:
                sent += f" {rng.randint(1, 2024)}"
            sentences.append(sent.capitalize() + rng.choice(".!?."))
        doc = " ".join(sentences)
        out.append(doc)
        size += len(doc) + 1
    return "\n".join(out) + "\n"


def text_file(data: DataConfig) -> Path:
    """The user's file, or the generated one (written once, atomically, reused by every trial)."""
    if data.text_path:
        return Path(data.text_path)
    size = int(data.text_mib * 2**20)
    path = cache_dir(data) / f"generated-text-seed{data.seed}-{size}.txt"
    if not path.exists():
        _atomic_write(path, generate_text(data.seed, size))
    return path


def read_documents(path: Path, max_bytes: int) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read(max_bytes)
    docs = [line.strip() for line in text.splitlines() if line.strip()]
    if not docs:
        raise ValueError(f"workload.data.text_path: {path.name} has no non-empty line")
    return docs


class BPETokenizer:
    """Byte-pair encoding over characters: ids 0 (end of document) and 1 (unknown) are reserved,
    then the most frequent characters, then merged pairs up to ``vocab_size``."""

    def __init__(self, alphabet: list[str], merges: list[tuple[int, int]]) -> None:
        self.alphabet = alphabet
        self.merges = merges
        self.char_id = {c: i + 2 for i, c in enumerate(alphabet)}
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.merged_id = {pair: len(alphabet) + 2 + rank for rank, pair in enumerate(merges)}

    @property
    def vocab_size(self) -> int:
        return 2 + len(self.alphabet) + len(self.merges)

    @classmethod
    def train(cls, sample: str, vocab_size: int) -> BPETokenizer:
        chars = [c for c, _ in Counter(sample).most_common() if c != "\n"]
        alphabet = chars[: max(0, vocab_size - 2)]
        tok = cls(alphabet, [])
        words = Counter(_PRETOKEN.findall(sample)).most_common(_TRAIN_WORDS)
        seqs = [[tok.char_id.get(c, UNK) for c in w] for w, _ in words]
        freq = [n for _, n in words]
        # pair counts and which words hold each pair, updated only for the words a merge touches
        pairs: Counter[tuple[int, int]] = Counter()
        where: dict[tuple[int, int], set[int]] = {}
        for i, seq in enumerate(seqs):
            for pair in itertools.pairwise(seq):
                pairs[pair] += freq[i]
                where.setdefault(pair, set()).add(i)
        merges: list[tuple[int, int]] = []
        next_id = 2 + len(alphabet)
        while next_id < vocab_size and pairs:
            best = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))  # ties: smallest ids
            if pairs[best] <= 0:
                break
            merges.append(best)
            for i in sorted(where.pop(best, ())):
                old = seqs[i]
                for pair in itertools.pairwise(old):
                    pairs[pair] -= freq[i]
                new = _merge(old, best, next_id)
                seqs[i] = new
                for pair in itertools.pairwise(new):
                    pairs[pair] += freq[i]
                    where.setdefault(pair, set()).add(i)
            pairs = +pairs  # drop pairs that no longer occur
            next_id += 1
        return cls(alphabet, merges)

    def encode_word(self, word: str) -> list[int]:
        parts = [self.char_id.get(c, UNK) for c in word]
        while len(parts) > 1:
            rank, pair = min((self.ranks.get(p, math.inf), p) for p in itertools.pairwise(parts))
            if rank == math.inf:
                break
            parts = _merge(parts, pair, self.merged_id[pair])  # type: ignore[index]
        return parts

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for word in _PRETOKEN.findall(text):
            out.extend(self.encode_word(word))
        return out

    def to_json(self) -> str:
        return json.dumps({"alphabet": self.alphabet, "merges": self.merges})

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        d = json.loads(text)
        return cls(list(d["alphabet"]), [tuple(m) for m in d["merges"]])  # type: ignore[misc]


def _merge(seq: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i, n = [], 0, len(seq)
    while i < n:
        if i + 1 < n and seq[i] == pair[0] and seq[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def load_tokenizer(data: DataConfig, docs: list[str], vocab_size: int) -> BPETokenizer:
    """Trained once per (sample, vocab size) and cached: every arm and trial uses the same one."""
    sample = "\n".join(docs)[:_SAMPLE_CHARS]
    key = hashlib.sha256(f"{vocab_size}\0{sample}".encode()).hexdigest()[:16]
    path = cache_dir(data) / f"bpe-{key}.json"
    if path.exists():
        return BPETokenizer.from_json(path.read_text(encoding="utf-8"))
    tok = BPETokenizer.train(sample, vocab_size)
    _atomic_write(path, tok.to_json())
    return tok


class PackedText(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Item ``b`` = batch ``b``: (b, inputs, targets), each ``micro_batch x seq_len`` int64."""

    def __init__(self, docs: list[str], tok: BPETokenizer, micro_batch: int, seq_len: int) -> None:
        self.docs, self.tok = docs, tok
        self.micro_batch, self.seq_len = micro_batch, seq_len
        self.need = micro_batch * (seq_len + 1)
        probe = docs[: min(len(docs), 32)]
        avg = max(1.0, sum(len(tok.encode(d)) + 1 for d in probe) / len(probe))
        self.stride = max(1, math.ceil(self.need / avg))

    def __len__(self) -> int:  # the stream is endless; the sampler picks the indices
        return 2**62

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        tokens: list[int] = []
        d = (index * self.stride) % len(self.docs)
        while len(tokens) < self.need:
            tokens.extend(self.tok.encode(self.docs[d]))
            tokens.append(EOS)
            d = (d + 1) % len(self.docs)
        rows = torch.tensor(tokens[: self.need], dtype=torch.long).view(self.micro_batch, -1)
        return index, rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


class StreamSampler(Sampler[int]):
    """Consecutive batch indices; with ``epoch_batches`` > 0 each epoch continues the stream."""

    def __init__(self, epoch_batches: int) -> None:
        self.epoch_batches = epoch_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.epoch_batches <= 0:
            i = 0
            while True:
                yield i
                i += 1
        start = self.epoch * self.epoch_batches
        yield from range(start, start + self.epoch_batches)


def make_loader(data: DataConfig, loader: LoaderConfig, bucket: BucketConfig, vocab_size: int,
                pin_memory: bool) -> tuple[DataLoader[Any], StreamSampler]:
    docs = read_documents(text_file(data), int(data.text_mib * 2**20))
    tok = load_tokenizer(data, docs, vocab_size)
    dataset = PackedText(docs, tok, bucket.micro_batch, bucket.seq_len)
    sampler = StreamSampler(loader.epoch_batches)
    dl = DataLoader(
        dataset,
        batch_size=None,  # an item is already a whole batch
        sampler=sampler,
        num_workers=loader.num_workers,
        pin_memory=pin_memory,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )
    return dl, sampler


def stream(dl: DataLoader[Any], sampler: StreamSampler) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from dl
        epoch += 1
