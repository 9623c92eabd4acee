"""Kernels timed the do_bench way (issue 48, part 3): the cache flush sized from the device's
L2 (or the CPU's largest cache), events per call where the device has them, repeats until the
median is tight or a cap, quantiles."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.platform import device as devmod
from orchestrator.platform import kernel_bench as kb

CPU = devmod.DeviceInfo("cpu", None, "cpu", 1)


def test_the_flush_is_sized_from_the_devices_l2() -> None:
    h100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", L2_cache_size=50 * 1024 ** 2)
    got = kb.gpu_cache(h100)
    assert got.bytes == 50 * 1024 ** 2 and "L2_cache_size" in got.source
    assert kb.flush_bytes(got) == 100 * 1024 ** 2  # twice the L2: every line evicted
    blind = kb.gpu_cache(SimpleNamespace(name="a device without the field"))
    assert blind.bytes is None and kb.flush_bytes(blind) == kb.DO_BENCH_FLUSH_BYTES


def test_the_cpu_cache_is_read_from_sys(tmp_path: Path) -> None:
    for i, size in enumerate(["48K", "2048K", "36M"]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    got = kb.cpu_cache(tmp_path)
    assert got.bytes == 36 * 1024 ** 2 and kb.flush_bytes(got) == 72 * 1024 ** 2
    assert kb.cpu_cache(tmp_path / "none").bytes is None


class _Events:
    """A device whose events say each call took ``per_call`` seconds, however long the host
    took: the timing must come from the events."""

    def __init__(self, per_call: list[float]) -> None:
        self.per_call = iter(per_call)
        self.syncs = 0

    def timer(self, dev: Any) -> Any:
        outer = self

        class T:
            def start(self) -> None:
                self.t = next(outer.per_call)

            def stop(self) -> None:
                pass

            def elapsed_s(self) -> float:
                return self.t
        return T()


def test_events_time_each_call_and_a_batch_syncs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _Events([0.010, 0.011, 0.009, 0.010, 0.012] * 40)
    monkeypatch.setattr(devmod, "device_timer", ev.timer)
    syncs: list[int] = []
    monkeypatch.setattr(devmod, "synchronize", lambda dev: syncs.append(1))
    calls: list[int] = []
    got = kb.bench(lambda: calls.append(1), CPU, warmup_calls=2, min_calls=10, max_calls=30,
                   target_rel_se=1e-9, time_cap_s=60, flush=False)
    assert got.clock == "device events" and len(got.times_s) == 30 and len(calls) == 32
    assert got.stopped_by == "call cap" and got.median_s == pytest.approx(0.010)
    assert got.quantiles_s["p20"] <= got.median_s <= got.quantiles_s["p80"]
    assert len(syncs) == 1 + 3  # after the warm-up, then one per batch of 10 calls


def test_it_stops_once_the_median_is_tight() -> None:
    got = kb.bench(lambda: sum(range(2000)), CPU, min_calls=10, max_calls=10_000,
                   target_rel_se=0.5, time_cap_s=30, flush=False)
    assert got.stopped_by == "spread" and len(got.times_s) == 10
    assert got.clock == "host clock around a synchronisation"
    fields = got.fields()
    assert fields["call_time_median_s"] == got.median_s and "call_time_p80_s" in fields
    assert fields["call_stopped_by"] == "spread" and fields["call_flush_bytes"] == 0


def test_a_time_cap_ends_a_noisy_kernel_and_the_flush_runs_on_the_cpu() -> None:
    import itertools
    import random

    rng = random.Random(1)
    ticks = itertools.count()
    clock = lambda: next(ticks) * 0.01 + rng.random() * 0.01  # noqa: E731 - noisy host clock
    got = kb.bench(lambda: None, CPU, min_calls=10, max_calls=10_000, target_rel_se=1e-6,
                   time_cap_s=0.5, clock=clock)
    assert got.stopped_by == "time cap" and 10 <= len(got.times_s) < 10_000
    assert got.flush_bytes == kb.flush_bytes(kb.cpu_cache())


class _FakeCuda:
    """torch.cuda's graph API as kernel_bench.graphed uses it: a capture records the calls made
    under ``graph(g)``; ``g.replay`` repeats them."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail, self.capturing, self.replays = fail, False, 0

    def Stream(self) -> Any:  # noqa: N802 - torch's name
        return SimpleNamespace(wait_stream=lambda other: None)

    def current_stream(self) -> Any:
        return SimpleNamespace(wait_stream=lambda other: None)

    def stream(self, s: Any) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def CUDAGraph(self) -> Any:  # noqa: N802
        fake = self

        class Graph:
            def replay(self) -> None:
                fake.replays += 1

        return Graph()

    def graph(self, g: Any) -> Any:
        import contextlib

        fake = self

        @contextlib.contextmanager
        def capture() -> Any:
            if fake.fail is not None:
                raise fake.fail
            fake.capturing = True
            yield
            fake.capturing = False

        return capture()


def test_graph_replay_on_request_and_why_not() -> None:
    """sweep.microbench_graph: the op captured once, each timed call a replay; an op the
    capture refuses, or a device without CUDA graphs, timed eagerly with the reason."""
    gpu = devmod.DeviceInfo("cuda", 0, "cuda:0", 1)
    calls: list[bool] = []
    cuda = _FakeCuda()
    fn, mode = kb.graphed(lambda: calls.append(cuda.capturing), gpu, cuda)
    assert mode == "graph replay" and calls == [False, False, False, True]  # 3 on a side stream
    fn()
    fn()
    assert cuda.replays == 2 and len(calls) == 4  # replays, not calls of the op
    bad = _FakeCuda(RuntimeError("operation not permitted when stream is capturing\nmore"))
    fn, mode = kb.graphed(lambda: None, gpu, bad)
    assert mode == ("eager (graph capture failed: RuntimeError: operation not permitted when "
                    "stream is capturing)")
    got = kb.bench(lambda: sum(range(100)), CPU, min_calls=10, max_calls=20, flush=False,
                   graph=True)
    assert got.mode == "eager (graph replay not offered on cpu: CUDA graphs only)"
    assert got.fields()["call_mode"] == got.mode and len(got.times_s) >= 10
