"""The GPT recipe's text pipeline: a real BPE tokenizer and packer behind a torch DataLoader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from orchestrator.campaign.run import run_campaign
from orchestrator.spec.config import BucketConfig, DataConfig
from recipes.gpt.config import LoaderConfig
from recipes.gpt.text_data import (
    BPETokenizer,
    PackedText,
    load_tokenizer,
    make_loader,
    read_documents,
    stream,
    text_file,
)
from tests.conftest import TINY


def _data(tmp_path: Path, **kw: Any) -> DataConfig:
    return DataConfig(kind="text", text_mib=0.1, cache_dir=str(tmp_path / "cache"), **kw)


def test_bpe_learns_merges_and_encodes_within_vocab() -> None:
    text = "the cat sat on the mat. the hat is on the cat!\n" * 50
    tok = BPETokenizer.train(text, 40)
    assert 20 < tok.vocab_size <= 40 and len(tok.merges) > 0  # stops when no pair is left
    ids = tok.encode("the cat sat on the mat.")
    assert all(0 <= i < 40 for i in ids)
    assert len(ids) < len("the cat sat on the mat.")  # merges shorten the sequence
    assert tok.encode("zz~") == [1, 1, 1]  # characters never seen -> UNK
    again = BPETokenizer.from_json(tok.to_json())
    assert again.encode("the hat sat") == tok.encode("the hat sat")


def test_generated_text_and_tokenizer_are_cached(tmp_path: Path) -> None:
    data = _data(tmp_path)
    path = text_file(data)
    first = path.stat().st_mtime_ns
    assert text_file(data) == path and path.stat().st_mtime_ns == first
    docs = read_documents(path, 2**20)
    assert len(docs) > 10
    tok = load_tokenizer(data, docs, 64)
    assert tok.vocab_size == 64  # a real corpus fills the vocabulary
    assert list((tmp_path / "cache").glob("bpe-*.json"))
    assert load_tokenizer(data, docs, 64).merges == tok.merges


def test_loader_settings_do_not_change_the_stream(tmp_path: Path) -> None:
    """Worker processes, prefetch and epochs change how batches are made, never which."""
    data, bucket = _data(tmp_path), BucketConfig("s16", 16, 3)

    def first(loader: LoaderConfig, n: int = 7) -> list[tuple[int, torch.Tensor]]:
        dl, sampler = make_loader(data, loader, bucket, 64, pin_memory=False)
        it = stream(dl, sampler)
        out = [next(it) for _ in range(n)]
        it.close()
        return [(i, x) for i, x, _ in out]

    ref = first(LoaderConfig())
    assert [i for i, _ in ref] == list(range(7))
    assert ref[0][1].shape == (3, 16) and ref[0][1].dtype == torch.long
    assert not torch.equal(ref[0][1], ref[1][1])
    for loader in (LoaderConfig(num_workers=2, prefetch_factor=2),
                   LoaderConfig(num_workers=1, persistent_workers=True, epoch_batches=3),
                   LoaderConfig(epoch_batches=2)):
        got = first(loader)
        assert [i for i, _ in got] == list(range(7)), loader
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ref, got)), loader
    ds = PackedText(read_documents(text_file(data), 2**20), load_tokenizer(data, [], 64), 3, 16)
    _, x, y = ds[5]
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_dataloader_sweep_reports_input_bound_share(compose: Any, run_dir: Path, tmp_path: Path) -> None:
    cfg = compose([*TINY, "+sweep=dataloader", "sweep.buckets=[s32]",
                   "sweep.values=[{num_workers:1,prefetch_factor:2,persistent_workers:true,pin_memory:true}]",
                   "sweep.labels=[1-worker]", "protocol.measured_steps=5", "workload.data.text_mib=0.1",
                   f"workload.data.cache_dir={json.dumps(str(tmp_path / 'cache'))}"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert {r["status"] for r in recs} == {"ok"}, [r.get("error") for r in recs]
    for r in recs:
        assert 0 < r["data_wait_share"] < 1
        steps = pd.read_csv(run_dir / "trials" / r["trial_id"] / "steps.csv")
        assert (steps["data_wait_s"] > 0).all()
        assert list(steps["batch_index"]) == list(range(len(steps)))  # the same stream in every arm
    worker = next(r for r in recs if r["arm_label"] == "1-worker")
    assert worker["pin_memory_effective"] is False and "dropped" in worker["pin_memory_note"]
    md = (run_dir / "decisions.md").read_text()
    assert "## Input pipeline" in md and "| s32 | in-process |" in md and "| s32 | 1-worker |" in md
    rows = [ln for ln in md.split("## Input pipeline")[1].splitlines() if ln.startswith("| s32 |")]
    assert len(rows) == 2 and all("%" in ln for ln in rows)
    (v,) = result.verdicts  # worker processes change how batches are made, not which
    assert v.verdict in ("retain", "reject", "inconclusive")
    assert any(r.startswith("correctness gate passed") for r in v.reasons), v.reasons
