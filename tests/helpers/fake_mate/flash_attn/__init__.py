"""A stand-in for MATE's ``mate-flash-attention`` (MooreThreads/mate, wrappers/flash-attention,
v0.1.3): it keeps the ``flash_attn`` import path but exports only the varlen and KV-cache entry
points (and the scheduler helper), no ``flash_attn_func`` and no ``__version__``: the version
lives in the distribution's metadata (the dist-info next to this package). Runs nothing."""


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                           max_seqlen_k=None, causal=False, **kwargs):
    raise RuntimeError("fake MATE: no MUSA device")


def flash_attn_with_kvcache(q, k_cache, v_cache, **kwargs):
    raise RuntimeError("fake MATE: no MUSA device")


def get_scheduler_metadata(**kwargs):
    raise RuntimeError("fake MATE: no MUSA device")


__all__ = ["flash_attn_with_kvcache", "flash_attn_varlen_func", "get_scheduler_metadata"]
