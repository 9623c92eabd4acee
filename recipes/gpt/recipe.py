"""The GPT recipe: builds model, optimizer and a deterministic token stream (synthetic, or text
tokenized and packed on the fly by a DataLoader), optionally under torch.compile."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from orchestrator.spec.config import BucketConfig
from orchestrator.core.phases import (
    ATTENTION,
    BACKWARD,
    CLIP,
    DATA,
    FORWARD,
    OPTIMIZER,
    phase,
)
from recipes.base import TrainerHooks, switchable
from recipes.gpt.attention import RecordedSdpa, make_attention, marked, resolve_backend
from recipes.gpt.config import GPTWorkloadConfig
from recipes.gpt.model import GPT, lm_loss
from recipes.gpt.text_data import make_loader, stream

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Batch:
    index: int  # position in the stream: the sample ids are index*micro_batch + row
    inputs: torch.Tensor
    targets: torch.Tensor


def synthetic_batch(seed: int, index: int, micro_batch: int, seq_len: int, vocab: int) -> Batch:
    """Batch ``index`` of the stream; a pure function of its arguments.

    Tokens follow a noisy affine recurrence so there is something to learn (the loss falls),
    which makes loss trajectories comparable across arms."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    start = torch.randint(0, vocab, (micro_batch, 1), generator=g)
    noise = torch.randint(0, 4, (micro_batch, seq_len), generator=g)
    steps = torch.arange(seq_len + 1).unsqueeze(0)
    tokens = (start * 7 + steps * 3 + torch.nn.functional.pad(noise, (1, 0)).cumsum(1)) % vocab
    return Batch(index, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


class GPTTrainer(TrainerHooks):
    def __init__(self, workload: GPTWorkloadConfig, bucket: BucketConfig, device: str) -> None:
        self.workload = workload
        self.bucket = bucket
        self.device = torch.device(device)
        m = workload.model
        self.dtype = DTYPES[workload.precision]
        attend = self._attention(m)
        torch.manual_seed(workload.seed)
        self.model = GPT(
            vocab_size=m.vocab_size,
            n_layer=m.n_layer,
            n_head=m.n_head,
            d_model=m.d_model,
            d_ff=m.d_ff,
            max_seq_len=max(b.seq_len for b in workload.buckets),
            dropout=m.dropout,
            attend=attend,
            activation_checkpointing=m.activation_checkpointing,
        ).to(self.device)
        o = workload.optimizer
        if o.name != "adamw":
            raise ValueError(f"workload.optimizer.name={o.name!r}: the gpt recipe supports adamw")
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
        )
        self.tokens_per_step = bucket.micro_batch * bucket.seq_len
        self.samples_per_step = bucket.micro_batch
        self.scaler = torch.amp.GradScaler(self.device.type) if self.dtype == torch.float16 else None
        self._loss_fn = self._loss
        c = m.compile
        if c.mode != "off":
            kwargs: dict[str, Any] = {"fullgraph": c.fullgraph, "dynamic": c.dynamic,
                                      "backend": c.backend}
            if c.backend == "inductor" and c.mode != "default":
                kwargs["mode"] = c.mode
            self._loss_fn = torch.compile(self._loss, **kwargs)  # compiles on first call
        self.mark_dynamic = c.mode != "off" and c.mark_dynamic
        # the other buckets' shapes, visited once in the trial's first step (compiled arms only)
        own = (bucket.micro_batch, bucket.seq_len)
        self.visits = [b for b in workload.buckets if (b.micro_batch, b.seq_len) != own]
        self.visits = list({(b.micro_batch, b.seq_len): b for b in self.visits}.values())
        if c.mode == "off" or not c.visit_buckets:
            self.visits = []

    def _attention(self, m: Any) -> Any:
        a = m.attention
        attend = make_attention(a.backend, sdpa_kernel=a.sdpa_kernel, block_q=a.block_q,
                                block_k=a.block_k, num_warps=a.num_warps,
                                num_stages=a.num_stages, device=self.device, dtype=self.dtype,
                                record=m.compile.mode == "off")
        self.attend_impl = attend  # what executes() reads: the kernel sdpa chose per shape
        if m.compile.mode == "off":  # the attention op's share of a profiled step (no-op untraced)
            attend = marked(attend, ATTENTION)
        return attend

    def switch(self, workload: GPTWorkloadConfig) -> None:
        """Another arm's attention backend or tile shape, between steps (protocol.pairing=
        steps): every block's attention function is replaced; weights, optimizer state and the
        data stream stay. Under torch.compile the new function is a new guard (one recompile
        the first time, a cache hit after)."""
        attend = self._attention(workload.model)
        for mod in unwrap(self.model).modules():
            if hasattr(mod, "attend"):
                mod.attend = attend
        self.workload = workload

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def batches(self) -> Iterator[Batch]:
        if self.workload.data.kind == "text":
            return self._text_batches()
        return self._synthetic_batches()

    def _text_batches(self) -> Iterator[Batch]:
        w = self.workload
        # page-locking needs an accelerator; on CPU torch would only warn and ignore it
        pin = w.loader.pin_memory and self.device.type != "cpu"
        loader, sampler = make_loader(w.data, w.loader, self.bucket, w.model.vocab_size, pin)
        for index, inputs, targets in stream(loader, sampler):
            yield Batch(index, inputs.to(self.device, non_blocking=pin),
                        targets.to(self.device, non_blocking=pin))

    def _synthetic_batches(self) -> Iterator[Batch]:
        b, w = self.bucket, self.workload
        index = 0
        while True:
            with phase(DATA):
                batch = synthetic_batch(w.data.seed, index, b.micro_batch, b.seq_len,
                                        w.model.vocab_size)
                out = Batch(
                    batch.index,
                    batch.inputs.to(self.device, non_blocking=True),
                    batch.targets.to(self.device, non_blocking=True),
                )
            yield out
            index += 1

    def _loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            logits = self.model(inputs)
        return lm_loss(logits, targets)

    def forward_loss(self, batch: Batch) -> torch.Tensor:
        """Forward and loss, through torch.compile when workload.model.compile.mode is set."""
        return self._loss_fn(batch.inputs, batch.targets)  # type: ignore[no-any-return]

    def forward_outputs(self, batch: Batch) -> torch.Tensor:
        """The model's outputs (logits) for a batch, under the precision policy (eager: the
        compiled function, when workload.model.compile is on, covers forward and loss)."""
        with self.autocast():
            return self.model(batch.inputs)  # type: ignore[no-any-return]

    def state_dict(self) -> dict[str, Any]:
        """Model weights of the underlying module: a torch.compile wrapper's ``_orig_mod.``
        prefix never reaches a checkpoint, so compiled and eager arms stay interchangeable."""
        return unwrap(self.model).state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        unwrap(self.model).load_state_dict(state, strict=True)

    def visit_shapes(self) -> list[str]:
        """workload.model.compile.visit_buckets: forward + backward once on every other bucket
        shape, as mixed-length training would, so a static-shape policy recompiles here (in the
        trial's first step, excluded and counted) rather than never in a one-bucket trial. No
        optimizer step, gradients dropped and the RNG restored: the model, its optimizer and the
        data stream are left as they were."""
        w = self.workload
        for b in self.visits:
            x = synthetic_batch(w.data.seed, 0, b.micro_batch, b.seq_len, w.model.vocab_size)
            inputs, targets = x.inputs.to(self.device), x.targets.to(self.device)
            if self.mark_dynamic:
                torch._dynamo.mark_dynamic(inputs, 1)
                torch._dynamo.mark_dynamic(targets, 1)
            on_device = self.device.type != "cpu"
            with torch.random.fork_rng(devices=[self.device.index or 0] if on_device else [],
                                       device_type=self.device.type if on_device else "cuda"):
                self.optimizer.zero_grad(set_to_none=True)
                self._loss_fn(inputs, targets).backward()
            self.optimizer.zero_grad(set_to_none=True)
        return [b.name for b in self.visits]

    # what executes() describes in full: which attention code runs (backend, sdpa kernel as
    # torch resolved it, tile shape); nothing else in the step depends on these keys
    executes_covers = tuple(f"workload.model.attention.{k}" for k in (
        "backend", "sdpa_kernel", "block_q", "block_k", "num_warps", "num_stages"))

    def executes(self) -> Any:
        """The attention code each call ran: for sdpa the kernel torch dispatched to per input
        shape and dtype (``auto`` resolved; '8x4x128x16/float32:sdpa-flash'), else the backend
        and its tile shape (``fa2`` resolved to what ran: tiled on the CPU, triton on a GPU,
        which adds its launch settings: 'triton-64x64-w4s2'). None under torch.compile (the compiled graph decides what runs) or
        where torch does not say which sdpa kernel it picks."""
        a = self.workload.model.attention
        if self.workload.model.compile.mode != "off":
            return None
        if isinstance(self.attend_impl, RecordedSdpa):
            described = self.attend_impl.describe()
            return None if described is None else {"attention": described}
        backend = resolve_backend(a.backend, self.device)
        what = {"tiled": f"tiled-{a.block_q}x{a.block_k}",
                "triton": f"triton-{a.block_q}x{a.block_k}-w{a.num_warps}s{a.num_stages}",
                }.get(backend, backend)
        return {"attention": [f"{self.bucket.micro_batch}x{self.bucket.seq_len}:{what}"]}

    def extra_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.visits:
            out["compile_buckets_visited"] = [b.name for b in self.visits]
        if self.workload.data.kind == "text" and self.workload.loader.pin_memory:
            pinned = self.device.type != "cpu"
            out["pin_memory_effective"] = pinned
            if not pinned:
                out["pin_memory_note"] = ("workload.loader.pin_memory dropped: page-locked host "
                                          "buffers need an accelerator to copy to")
        return out

    def train_step(self, batch: Batch) -> torch.Tensor:
        # phase ranges cost nothing outside a profiled window (orchestrator.core.phases)
        with phase(OPTIMIZER):
            self.optimizer.zero_grad(set_to_none=True)
        if self.mark_dynamic:
            torch._dynamo.mark_dynamic(batch.inputs, 1)
            torch._dynamo.mark_dynamic(batch.targets, 1)
        with phase(FORWARD):
            loss = self.forward_loss(batch)
        clip = self.workload.optimizer.grad_clip
        if self.scaler is not None:
            with phase(BACKWARD):
                self.scaler.scale(loss).backward()
            with phase(CLIP):
                self.scaler.unscale_(self.optimizer)
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            with phase(OPTIMIZER):
                self.scaler.step(self.optimizer)
                self.scaler.update()
        else:
            with phase(BACKWARD):
                loss.backward()
            if clip > 0:
                with phase(CLIP):
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            with phase(OPTIMIZER):
                self.optimizer.step()
        return loss.detach()

    useful_flops_definition = (
        "6 x N x tokens + 12 x n_layer x seq_len x d_model x tokens per step: N counts the "
        "weights of the matrix multiplies (every Linear, LM head included; embeddings, biases "
        "and norm gains do no matmul work and are left out), 2 FLOPs per multiply-add, forward "
        "+ backward = 3 x forward; the attention term counts the full seq x seq score square "
        "for QK^T and PV (PaLM / torchtitan convention: causal masking is not discounted, so "
        "the masked half is counted); activation recompute excluded"
    )

    def _matmul_params(self) -> int:
        return sum(mod.weight.numel() for mod in self.model.modules() if isinstance(mod, torch.nn.Linear))

    def _attention_forward_flops(self) -> float:
        """QK^T and PV over the full square: 2 matmuls x 2 FLOPs x seq^2 x d_model per layer."""
        m, b = self.workload.model, self.bucket
        return float(2 * 2 * m.n_layer * b.micro_batch * b.seq_len**2 * m.d_model)

    def useful_flops_per_step(self) -> float:
        """Analytic training FLOPs of one step (see :attr:`useful_flops_definition`)."""
        matmul = 6 * self._matmul_params() * self.tokens_per_step
        return float(matmul + 3 * self._attention_forward_flops())

    def recompute_flops_per_step(self) -> float:
        """FLOPs activation checkpointing adds (0 without it); useful + this = hardware FLOPs.

        Each block's forward runs again in the backward, except its last matmul (the MLP output
        projection): non-reentrant checkpointing stops early (torch's default) once the last
        tensor the backward needs is recomputed, and that matmul's output is not one of them.
        The LM head is not checkpointed."""
        if not self.workload.model.activation_checkpointing:
            return 0.0
        rerun = sum(mod.weight.numel() for blk in self.model.blocks for mod in blk.modules()
                    if isinstance(mod, torch.nn.Linear) and mod is not blk.out)
        return float(2 * rerun * self.tokens_per_step + self._attention_forward_flops())


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module under a torch.compile wrapper (``OptimizedModule._orig_mod``), else itself."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else model


@switchable("workload.model.attention.backend", "workload.model.attention.block_q",
            "workload.model.attention.block_k", "workload.model.attention.sdpa_kernel",
            "workload.model.attention.num_warps", "workload.model.attention.num_stages")
def build(workload: GPTWorkloadConfig, bucket: BucketConfig, device: str) -> GPTTrainer:
    return GPTTrainer(workload, bucket, device)


def attention_microbench(workload: GPTWorkloadConfig, bucket: BucketConfig,
                         device: str) -> Any:
    """The attention op alone, forward and backward, at the bucket's shapes
    ([micro_batch, n_head, seq_len, d_model / n_head]) with the workload's attention settings:
    the operation a tile or backend sweep changes (sweep.microbench: attention)."""
    m = workload.model
    dev = torch.device(device)
    dtype = DTYPES[workload.precision]
    a = m.attention
    attend = make_attention(a.backend, sdpa_kernel=a.sdpa_kernel, block_q=a.block_q,
                            block_k=a.block_k, num_warps=a.num_warps, num_stages=a.num_stages,
                            device=dev, dtype=dtype)
    g = torch.Generator(device="cpu").manual_seed(workload.seed)
    shape = (bucket.micro_batch, m.n_head, bucket.seq_len, m.d_model // m.n_head)
    q, k, v, dout = (torch.randn(shape, generator=g).to(dev, dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def call() -> None:
        for t in (q, k, v):
            t.grad = None
        attend(q, k, v).backward(dout)

    return call


build.microbenchmarks = {"attention": attention_microbench}  # type: ignore[attr-defined]
