"""The ``gpt`` workload's schema (kind ``gpt``): the embedded GPT, its attention kernels,
torch.compile, optimizer, data and DataLoader settings, and their checks.

Imported by the pre-flight and by every worker (no torch here); the schema registers itself
under its kind, and ``conf/workload/gpt_*.yaml`` extend it (``/schema/workload/gpt``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from orchestrator.spec.config import (
    DATA_KINDS,
    Choice,
    choices,
    DataConfig,
    ProtocolConfig,
    SweptArm,
    WorkloadConfig,
    workload_schema,
)
from orchestrator.core import musa_rules
from orchestrator.core.errors import ConfigError, check_choice, check_positive

ATTENTION_BACKENDS = ("eager", "sdpa", "tiled", "triton", "fa2", "flash_attn")
# the backends that run the Triton kernel somewhere (fa2: on a GPU), and what it can run
TRITON_BACKENDS = ("triton", "fa2")
TRITON_TILES = (16, 32, 64, 128, 256)  # a tile side is a tl.dot operand side: a power of two
TRITON_HEAD_DIMS = (16, 32, 64, 128)
TRITON_WARPS = (1, 2, 4, 8, 16)


class AttentionBackend(Choice):
    eager = "eager"
    sdpa = "sdpa"
    tiled = "tiled"
    triton = "triton"
    fa2 = "fa2"
    flash_attn = "flash_attn"


class SdpaKernel(Choice):
    auto = "auto"
    math = "math"
    flash = "flash"
    efficient = "efficient"
    cudnn = "cudnn"


if TYPE_CHECKING:  # its members' names have hyphens: looked up by name (CompileMode["off"])
    class CompileMode(Choice):
        ...
else:
    CompileMode = choices("CompileMode", "off", "default", "reduce-overhead",
                          "max-autotune-no-cudagraphs", "max-autotune")


class CompileBackend(Choice):
    inductor = "inductor"
    aot_eager = "aot_eager"
    eager = "eager"


assert AttentionBackend.values() == ATTENTION_BACKENDS
SDPA_KERNELS = SdpaKernel.values()
COMPILE_MODES = CompileMode.values()
COMPILE_BACKENDS = CompileBackend.values()


@dataclass
class AttentionConfig:
    # eager | sdpa | tiled (FA2 in PyTorch) | triton (FA2 as Triton kernels) | fa2 (triton on a
    # GPU, tiled on the CPU) | flash_attn
    backend: AttentionBackend = AttentionBackend["sdpa"]
    sdpa_kernel: SdpaKernel = SdpaKernel["auto"]  # auto | math | flash | efficient | cudnn (sdpa only)
    block_q: int = 64  # tiled / triton / fa2: query rows per tile
    block_k: int = 64  # tiled / triton / fa2: key/value rows per tile
    num_warps: int = 4  # triton only: warps per kernel instance (1, 2, 4, 8, 16)
    num_stages: int = 2  # triton only: software-pipelining stages of the tile loops (1-8)


@dataclass
class CompileConfig:
    """torch.compile of the loss function (model forward + loss; backward through AOTAutograd).

    Compile and autotune happen in the warm-up steps, which are excluded from steady state; the
    trial records their cost as ``compile_time_s`` with graph breaks and recompiles."""

    mode: CompileMode = CompileMode["off"]  # off (eager) | default | reduce-overhead | max-autotune ...
    backend: CompileBackend = CompileBackend["inductor"]  # inductor | aot_eager | eager (aot_eager/eager: dynamo only, no codegen)
    fullgraph: bool = False  # a graph break becomes an error (the trial fails) instead of a split
    dynamic: Optional[bool] = None  # None = torch's automatic dynamic shapes; True/False forces it
    mark_dynamic: bool = False  # mark the sequence dimension of every batch dynamic
    # in the first (excluded) step, also run forward + backward once on every other bucket
    # shape of the workload, so the shape policy's recompiles are counted and paid for up front
    visit_buckets: bool = False


@dataclass
class GPTModelConfig:
    vocab_size: int = 512
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 512
    dropout: float = 0.0
    # recompute each block's activations in the backward (torch.utils.checkpoint): executed
    # FLOPs then exceed useful FLOPs by the recomputed forward, so HFU > MFU
    activation_checkpointing: bool = False
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)


@dataclass
class OptimizerConfig:
    name: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping


@dataclass
class LoaderConfig:
    """torch DataLoader settings for ``data.kind=text`` (how batches are made, not which)."""

    num_workers: int = 0  # 0 = batches are made in the training process
    pin_memory: bool = False  # page-locked host buffers (no effect without an accelerator)
    prefetch_factor: Optional[int] = None  # batches in flight per worker (needs num_workers > 0)
    persistent_workers: bool = False  # keep workers across epochs (needs num_workers > 0)
    # batches per loader epoch; 0 = one endless epoch. With N > 0 the loader is re-iterated every
    # N batches (the stream continues), so worker start-up recurs unless persistent_workers
    epoch_batches: int = 0


@workload_schema
@dataclass
class GPTWorkloadConfig(WorkloadConfig):
    kind: str = "gpt"
    recipe: str = "gpt"
    model: GPTModelConfig = field(default_factory=GPTModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)

    def validate(self) -> None:
        m = self.model
        check_choice("workload.model.attention.backend", m.attention.backend, ATTENTION_BACKENDS)
        check_choice("workload.model.attention.sdpa_kernel", m.attention.sdpa_kernel, SDPA_KERNELS)
        check_positive("workload.model.attention.block_q", m.attention.block_q)
        check_positive("workload.model.attention.block_k", m.attention.block_k)
        check_positive("workload.model.attention.num_warps", m.attention.num_warps)
        check_positive("workload.model.attention.num_stages", m.attention.num_stages)
        check_positive("workload.model.vocab_size", m.vocab_size)
        check_positive("workload.model.n_layer", m.n_layer)
        if not 0 <= m.dropout < 1:
            raise ConfigError("workload.model.dropout", f"must be in [0, 1), got {m.dropout}")
        if m.d_model % m.n_head:
            raise ConfigError(
                "workload.model.n_head",
                f"d_model={m.d_model} must be divisible by n_head={m.n_head}",
            )
        for i, b in enumerate(self.buckets):
            if b.seq_len < 2:
                raise ConfigError(f"workload.buckets[{i}].seq_len", "must be >= 2")
        if m.attention.backend in TRITON_BACKENDS:
            _check_triton(m)
        _check_compile(m.compile)
        _check_data(self.data, self.loader)

    def check_arms(self, protocol: ProtocolConfig, arms: list[SweptArm], key: str,
                   variable: str) -> None:
        gpt = [a.workload for a in arms if isinstance(a.workload, GPTWorkloadConfig)]
        if any(w.model.compile.mode != "off" for w in gpt) and protocol.warmup_steps < 1:
            raise ConfigError("protocol.warmup_steps",
                              "must be >= 1 when an arm uses torch.compile: the first step "
                              "compiles, and compile time must stay out of the measured steps")
        visiting = [w for w in gpt if w.model.compile.visit_buckets]
        if visiting and all(w.model.compile.mode == "off" for w in visiting):
            raise ConfigError("workload.model.compile.visit_buckets",
                              "counts the recompiles of other bucket shapes, which needs "
                              "torch.compile in some arm; set workload.model.compile.mode (e.g. "
                              "default) or drop it")

    def forces_attention_kernel(self) -> bool:
        a = self.model.attention
        return a.backend == "flash_attn" or (a.backend == "sdpa" and a.sdpa_kernel != "auto")

    def attention_refusal(self, target: dict[str, Any]) -> str | None:
        """Only MUSA is modelled: torch_musa's selector is known from its source
        (orchestrator.core.musa_rules); elsewhere the correctness gate finds out."""
        if target.get("kind") != "musa":
            return None
        a = self.model.attention
        if a.backend == "flash_attn":
            mate = musa_rules.flash_attn_provider(target.get("flash_attn") or []).startswith("MATE")
            return ("the gpt recipe's flash_attn backend calls flash_attn_func on CUDA only"
                    + ("; this flash_attn is MATE's, which exports flash_attn_varlen_func and "
                       "flash_attn_with_kvcache, no flash_attn_func" if mate else ""))
        if a.backend != "sdpa":
            return None
        head = self.model.d_model // self.model.n_head
        dtype = _DTYPES.get(str(self.precision), str(self.precision))
        return musa_rules.musa_sdpa_refusal(a.sdpa_kernel, dtype, head, head,
                                            list(target.get("archs") or [None]))

    def reads_text(self) -> bool:
        return self.data.kind == "text"


_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _check_triton(m: GPTModelConfig) -> None:
    """What the Triton kernel can run, refused before any work (backend fa2 runs it on GPUs)."""
    a = m.attention
    for key in ("block_q", "block_k"):
        v = getattr(a, key)
        if v not in TRITON_TILES:
            raise ConfigError(f"workload.model.attention.{key}",
                              f"backend {a.backend} tiles are powers of two from 16 to 256, got "
                              f"{v}; e.g. workload.model.attention.{key}=64")
    head_dim = m.d_model // m.n_head
    if head_dim not in TRITON_HEAD_DIMS:
        raise ConfigError("workload.model.n_head",
                          f"backend {a.backend} needs a head dim (d_model / n_head) of "
                          f"{', '.join(map(str, TRITON_HEAD_DIMS))}, got {head_dim} (d_model="
                          f"{m.d_model}, n_head={m.n_head}); change n_head, or use backend "
                          "sdpa or tiled")
    check_choice("workload.model.attention.num_warps", a.num_warps, TRITON_WARPS)
    if not 1 <= a.num_stages <= 8:
        raise ConfigError("workload.model.attention.num_stages",
                          f"must be from 1 to 8, got {a.num_stages}")


def _check_compile(c: CompileConfig) -> None:
    check_choice("workload.model.compile.mode", c.mode, COMPILE_MODES)
    check_choice("workload.model.compile.backend", c.backend, COMPILE_BACKENDS)
    if c.backend != "inductor" and c.mode not in ("off", "default"):
        raise ConfigError("workload.model.compile.mode",
                          f"{c.mode!r} is an inductor mode; with backend={c.backend} use "
                          "mode=default, or set workload.model.compile.backend=inductor")
    if c.mark_dynamic and c.mode == "off":
        raise ConfigError("workload.model.compile.mark_dynamic",
                          "needs torch.compile; set workload.model.compile.mode (e.g. default)")


def _check_data(d: DataConfig, lo: LoaderConfig) -> None:
    check_choice("workload.data.kind", d.kind, DATA_KINDS)
    if not d.text_mib > 0:
        raise ConfigError("workload.data.text_mib", f"must be > 0, got {d.text_mib}")
    if d.text_path is not None and not os.path.isfile(d.text_path):
        raise ConfigError("workload.data.text_path",
                          f"no such file {os.path.basename(d.text_path)!r}; point it at a UTF-8 "
                          "text file (one document per line) or null to generate one")
    if lo.num_workers < 0:
        raise ConfigError("workload.loader.num_workers", f"must be >= 0, got {lo.num_workers}")
    if lo.epoch_batches < 0:
        raise ConfigError("workload.loader.epoch_batches", f"must be >= 0, got {lo.epoch_batches}")
    if lo.num_workers == 0:
        for key in ("prefetch_factor", "persistent_workers"):
            if getattr(lo, key) not in (None, False):
                raise ConfigError(f"workload.loader.{key}",
                                  "needs worker processes; set workload.loader.num_workers > 0")
    if lo.prefetch_factor is not None and lo.prefetch_factor < 1:
        raise ConfigError("workload.loader.prefetch_factor", f"must be >= 1, got {lo.prefetch_factor}")
    if d.kind != "text" and lo != LoaderConfig():
        raise ConfigError("workload.loader",
                          "DataLoader settings apply to the text pipeline; set "
                          "workload.data.kind=text (the synthetic stream has no loader)")
