"""What the MUSA stack's own source says, as pure functions: which SDPA kernel torch_musa's
selector can run, what MATE's flash_attn exports, how the MUSA version tools print.

No torch and no device here: the device seam (:mod:`orchestrator.platform.device`) and the environment
report feed these with what they read, the pre-flight (:mod:`orchestrator.campaign.validate`) asks them
about a sweep's arms. Sources (torch_musa 2.7.1, ``MooreThreads/torch_musa``):

* ``torch_musa/csrc/aten/ops/attention/mudnn/SDPUtils.h`` (``select_backend``,
  ``use_flash_attention``): flash or math, nothing else. Flash needs the runtime flag on, q/k/v
  all 3-D or all 4-D, head dims qk <= 128 and v <= 128 (or, on arch >= 2.2, qk 192 with v 128,
  or qk = v = 160), a mask that needs no gradient, mp arch >= 2.2, fp16 or bf16. Otherwise math
  when it is enabled, else the error "Invalid backend configuration for musa!"; with math,
  flash and efficient all disabled, "No viable backend for scaled_dot_product_attention in
  musa" (``SDPBackendSelect.cpp``). So forcing ``efficient`` or ``cudnn`` raises, always.
* ``torch_patches/aten_src_ATen_native_transformers_attention.cpp.patch``: on MUSA the math
  choice runs ``aten::_scaled_dot_product_attention_math_musa`` (muDNN), the flash choice
  ``aten::_scaled_dot_product_attention_flash_musa`` (muDNN), not ATen's composite math.
* ``MooreThreads/mate`` ``wrappers/flash-attention``: the ``mate-flash-attention`` package
  (v0.1.x) keeps the ``flash_attn`` import path but exports ``flash_attn_varlen_func``,
  ``flash_attn_with_kvcache`` and ``get_scheduler_metadata``, no ``flash_attn_func`` and no
  ``__version__`` (the version is the distribution's); from v0.2 it ships as ``flash_attn_3``
  (import path ``flash_attn_interface``) and no ``flash_attn`` package at all. Its docs cover
  the forward pass only.
"""

from __future__ import annotations

import json
import re
from typing import Any

SDPA_KERNELS_MUSA = ("flash", "math")
MUSA_FLASH_DTYPES = ("float16", "bfloat16")
MUSA_FLASH_MIN_ARCH = (2, 2)
MUSA_IMPLEMENTATION = {
    "flash": "muDNN flash (aten::_scaled_dot_product_attention_flash_musa)",
    "math": "muDNN math (aten::_scaled_dot_product_attention_math_musa), not ATen's composite",
}
# flash_attn distributions by who made them (importlib.metadata names, normalised)
MATE_FLASH_DISTS = ("mate-flash-attention", "flash-attn-3")
FLASH_ATTN_ENTRY_POINTS = ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache")


def arch_tuple(arch: str | None) -> tuple[int, int] | None:
    """'2.2' -> (2, 2); None for an unknown arch."""
    if not arch:
        return None
    m = re.fullmatch(r"(\d+)\.(\d+)", str(arch).strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def musa_flash_head_dims_ok(qk: int, v: int) -> bool:
    """``check_musa_attention_input``: the head dims flash accepts (on arch >= 2.2, the only
    arch flash runs on at all)."""
    return (qk <= 128 and v <= 128) or (qk, v) in ((192, 128), (160, 160))


def musa_sdpa_refusal(kernel: str, dtype: str, head_dim_qk: int, head_dim_v: int,
                      archs: list[str | None]) -> str | None:
    """Why torch_musa's SDPA selector cannot run ``kernel`` forced with
    ``sdpa_kernel(...)`` for these inputs on every one of the ``archs`` listed (the visible
    devices), or None when it can. ``auto`` and ``math`` always run (math is muDNN's);
    ``efficient`` and ``cudnn`` never do."""
    if kernel in ("auto", "math"):
        return None
    if kernel in ("efficient", "cudnn"):
        return (f"torch_musa's SDPA selector knows only flash and math; forcing {kernel} raises "
                "a configuration error ('Invalid backend configuration for musa!')")
    if kernel != "flash":
        return f"unknown SDPA kernel {kernel!r}"
    if dtype not in MUSA_FLASH_DTYPES:
        return (f"MUSA flash SDPA runs fp16 or bf16 only, this arm computes attention in {dtype} "
                "(set workload.precision=bf16)")
    if not musa_flash_head_dims_ok(head_dim_qk, head_dim_v):
        return (f"MUSA flash SDPA takes head dims <= 128 (or 192/128, 160/160), this model's are "
                f"{head_dim_qk}/{head_dim_v}")
    low = [a for a in archs if (arch_tuple(a) or (99, 0)) < MUSA_FLASH_MIN_ARCH]
    if low:
        return (f"MUSA flash SDPA needs mp arch >= 2.2, a visible device has arch {low[0]} "
                "(S80/S3000 class)")
    return None


def flash_attn_provider(dists: list[str]) -> str:
    """Who made the installed ``flash_attn``: MATE (Moore Threads) or Dao-AILab's flash-attn."""
    names = {d.lower().replace("_", "-") for d in dists}
    if names & set(MATE_FLASH_DISTS):
        return "MATE (Moore Threads)"
    if "flash-attn" in names:
        return "flash-attn (Dao-AILab)"
    return "unknown" if not names else ", ".join(sorted(names))


# --------------------------------------------------------------------------- version tools


def parse_version_tool(name: str, text: str) -> dict[str, Any]:
    """What a MUSA ``<component>_version`` tool printed: ``{"version": ..., **fields}``.

    Two formats are known. Before MUSA 5.2 the tools print the component's name, a colon and a
    JSON object, e.g. ``musa_toolkits:{"version":"4.1.0","gitbranch":...}`` (torch_musa's
    ``benchmark/operator_benchmark/utils/sw_stack_detection.py`` strips whitespace and parses
    the JSON); MUSA 5.2 prints plain text lines, ``musa_toolkits version: 5.2.0`` then
    ``key: value`` lines (``toolkit tag: ...``). An output in neither form gives
    ``{"version": None}`` with the start of the text."""
    text = (text or "").strip()
    m = re.search(r"^\s*([\w.-]+)\s*:\s*(\{.*\})", text, re.DOTALL)
    if m:
        try:
            data = json.loads(re.sub(r"[\n\t]+", "", m.group(2)))
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            return {"format": "json", "version": data.get("version"),
                    **{k: v for k, v in data.items() if k != "version"}}
    out: dict[str, Any] = {"format": "text", "version": None}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key.endswith("version") and out["version"] is None and re.match(r"\d", value):
            out["version"] = value
        elif key:
            out[re.sub(r"\W+", "_", key)] = value
    if out["version"] is None:
        return {"format": "unknown", "version": None, "output": text[:200]}
    return out


def version_number(version: str | None) -> int | None:
    """torch_musa's tests' integer form: major*1000 + minor*10 + micro ('4.2.0' -> 4020)."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return None
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 + int(m.group(3) or 0)
