"""Muon on one process: Newton-Schulz, scaling, the optimizer step, the cost model on
hand-computed cases, the registry adapter, calibration fits, topology and config errors."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import torch

from orchestrator.platform import device as devmod
from orchestrator.platform import fabric
from recipes.muon.config import MuonOptimizerConfig
from orchestrator.core.errors import ConfigError
from recipes.muon import checks, topology
from recipes.muon.calibrate import fit_line
from recipes.muon.cost import CostProfile, Link, ModeResolver, choose, interpolate, \
    mode_costs, profile_from_registry
from recipes.muon.newton_schulz import COEFFICIENT_SETS, DEFAULT_EPS, coefficients, newton_schulz, \
    newton_schulz_tp, quadratic_steps, scale_factor
from recipes.muon.optimizer import Muon, MuonSettings

# --------------------------------------------------------------------------- Newton-Schulz


def test_coefficient_schedules() -> None:
    assert coefficients("simple", 3) == [(3.4445, -4.7750, 2.0315)] * 3
    q = coefficients("quintic", 7)
    assert len(q) == 7 and q[5] == q[0] and q[4] == (2.8366, -3.0525, 1.2012)
    assert quadratic_steps("cubic", 5) == 0 and quadratic_steps("quintic", 5) == 5
    assert set(COEFFICIENT_SETS) == set(checks.COEFFICIENT_SETS)
    with pytest.raises(ValueError, match="unknown coefficient set"):
        coefficients("septic", 5)


def test_newton_schulz_orthogonalises_and_transposes() -> None:
    x = torch.randn(48, 16, generator=torch.Generator().manual_seed(0))
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    polar = u @ vh
    # the quintic schedule is deliberately inexact: singular values land near 1, not on it
    assert (newton_schulz(x, 5, "quintic") - polar).abs().max() < 0.1
    # the cubic iteration converges to the polar factor
    assert (newton_schulz(x, 40, "cubic") - polar).abs().max() < 1e-4
    # Gram on the smaller dim either way round: NS(x^T) = NS(x)^T
    torch.testing.assert_close(newton_schulz(x.T.contiguous(), 5), newton_schulz(x, 5).T)
    # bf16 compute, fp32 result
    low = newton_schulz(x, 5, compute_dtype=torch.bfloat16)
    assert low.dtype == torch.float32 and (low - newton_schulz(x, 5)).abs().max() < 0.05
    assert newton_schulz(torch.zeros(4, 3), 5).abs().max() == 0  # eps guards the zero matrix
    with pytest.raises(TypeError, match="fp32"):
        newton_schulz(x.double(), 5)


def test_tiny_norm_input_is_orthogonalised_like_the_same_matrix_at_norm_one() -> None:
    # a floor of 1e-7 on the Frobenius norm (the old default) shrank a norm-1e-8 input to 0.1,
    # so NS started far below 1: largest singular value 1.051 here, against 1.032 at norm 1
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    x = x / torch.linalg.vector_norm(x)
    ref = newton_schulz(x, 5, "quintic")
    for norm in (1e-8, 1.8e-8, 1e-12):
        torch.testing.assert_close(newton_schulz(x * norm, 5, "quintic"), ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(newton_schulz_tp(x * norm, 5, partition_dim=None), ref,
                                   atol=1e-5, rtol=1e-4)
    # the defaults agree with Emerging-Optimizers' 1e-15 everywhere the floor is set
    assert DEFAULT_EPS == 1e-15 and MuonSettings().eps == DEFAULT_EPS
    assert MuonOptimizerConfig().eps == DEFAULT_EPS


def test_published_coefficient_sets_literally() -> None:
    # Polar Express (arXiv:2505.16932) and CANS (arXiv:2506.10935) as Emerging-Optimizers ships
    # them; per-iteration schedules: past their end the last tuple repeats
    pe = [(8.2051, -22.9019, 16.4607), (4.0664, -2.8612, 0.5184), (3.9096, -2.8234, 0.5250),
          (3.2856, -2.4153, 0.4853), (2.2779, -1.6198, 0.3985), (1.8726, -1.2307, 0.3585),
          (1.8564, -1.2132, 0.3568), (1.8750, -1.2500, 0.3750)]
    cans = [(8.4703, -25.1081, 18.6293), (4.1828, -3.1087, 0.5806), (3.9619, -2.9541, 0.5630),
            (3.2866, -2.4647, 0.5074), (2.2737, -1.6447, 0.4162)]
    assert COEFFICIENT_SETS["polar_express"] == pe and COEFFICIENT_SETS["cans"] == cans
    assert coefficients("polar_express", 10) == pe + [pe[-1]] * 2
    assert coefficients("polar_express", 3) == pe[:3]
    assert coefficients("cans", 7) == cans + [cans[-1]] * 2
    assert quadratic_steps("polar_express", 8) == 8 and quadratic_steps("cans", 5) == 5


@pytest.mark.parametrize(("name", "steps", "dtype", "tol"), [
    ("polar_express", 8, torch.float32, 0.01),
    ("polar_express", 8, torch.bfloat16, 0.01),
    ("cans", 5, torch.float32, 0.15),
    ("cans", 5, torch.bfloat16, 0.15),
])
def test_published_sets_bring_singular_values_near_one(name: str, steps: int, dtype: Any,
                                                       tol: float) -> None:
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    s_in = torch.linalg.svdvals(x / torch.linalg.vector_norm(x))
    assert s_in.max() < 0.4  # the input's singular values start far from 1
    s = torch.linalg.svdvals(newton_schulz(x, steps, name, compute_dtype=dtype))
    assert (s - 1).abs().max() < tol, s


def test_unsharded_tp_call_is_bit_identical() -> None:
    x = torch.randn(20, 12)
    for mode in ("duplicated", "distributed"):
        assert torch.equal(newton_schulz_tp(x, 5, partition_dim=None, mode=mode),
                           newton_schulz(x, 5))


@pytest.mark.parametrize("m,n", [(512, 512), (512, 256), (256, 512), (97, 37), (37, 97)])
def test_scale_factors(m: int, n: int) -> None:
    assert scale_factor(m, n, "shape_scaling") == max(1, m / n) ** 0.5
    assert scale_factor(m, n, "spectral", 0.2) == max(m, n) ** 0.5 * 0.2
    assert scale_factor(m, n, "unit_rms_norm") == (m / n) ** 0.5


def test_muon_step_by_hand() -> None:
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.randn(8, 4, generator=g))
    p0 = p.detach().clone()
    p.grad = torch.randn(8, 4, generator=g)
    s = MuonSettings(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1, ns_steps=5,
                     scale_mode="shape_scaling", extra_scale_factor=0.5)
    Muon([p], s).step()
    buf = 0.1 * p.grad  # EMA from zero: lerp(0, g, 1 - 0.9)
    update = p.grad.lerp(buf, 0.9)
    want = p0 * (1 - 0.1 * 0.1) - 0.1 * newton_schulz(update, 5) * 2**0.5 * 0.5
    torch.testing.assert_close(p.detach(), want)


# --------------------------------------------------------------------------- cost model

FAST = CostProfile("test", "datasheet", {"fp32": 1e12, "bf16": 1e15},
                   intra=Link(100e9, 10e-6), inter=Link(10e9, 10e-6))


def test_tall_weight_hand_computed() -> None:
    # [8192, 1024] rows split 4 ways, 5 quintic steps, fp32
    c = mode_costs(8192, 1024, 4, 5, profile=FAST)
    s, l = 1024, 8192
    assert c["duplicated"].flops == 5 * 4 * s * s * l + 5 * 2 * s**3  # 182.5 GFLOP
    assert c["distributed"].flops == 5 * 4 * s * s * (l / 4) + 5 * 2 * s**3  # 53.7 GFLOP
    assert c["duplicated"].bytes == 8192 * 1024 * 4 * 0.75
    assert c["distributed"].bytes == 5 * 2 * 1024**2 * 4 * 0.75 + 2 * 4 * 0.75
    assert (c["duplicated"].collectives, c["distributed"].collectives) == (1, 6)
    assert c["duplicated"].total_s == pytest.approx(182.536e9 / 1e12 + 25.165824e6 / 100e9 + 10e-6,
                                                    rel=1e-4)
    assert choose(8192, 1024, 4, 5, profile=FAST).mode == "distributed"
    # column split of the transposed (wide) weight is the same problem
    assert choose(1024, 8192, 4, 5, partition_dim=1, profile=FAST).mode == "distributed"


def test_wide_weight_split_on_rows_stays_duplicated() -> None:
    # rows of [1024, 8192] split: the distributed Gram is 8192 x 8192 on every rank
    c = mode_costs(1024, 8192, 4, 5, profile=FAST)
    assert c["distributed"].flops == 5 * 4 * 8192**2 * 256 + 5 * 2 * 8192**3
    assert choose(1024, 8192, 4, 5, profile=FAST).mode == "duplicated"


def test_tiny_weight_is_decided_by_latency() -> None:
    # [64, 64] over 2 ranks: distributed needs fewer FLOPs, but 6 collectives cost 60 us
    assert choose(64, 64, 2, 5, profile=FAST).mode == "duplicated"
    no_latency = CostProfile("test0", "datasheet", {"fp32": 1e12}, Link(100e9, 0.0),
                             Link(10e9, 0.0))
    assert choose(64, 64, 2, 5, profile=no_latency).mode == "distributed"


def test_square_and_cross_domain() -> None:
    kw: dict[str, Any] = dict(ns_dtype="bf16", profile=CostProfile(
        "nvl", "datasheet", {"bf16": 1e15}, intra=Link(900e9, 5e-6), inter=Link(50e9, 5e-6)))
    # [4096, 2048] over 8: inside the fast domain the saved FLOPs win ...
    assert choose(4096, 2048, 8, 5, crosses_domain=False, **kw).mode == "distributed"
    # ... across it, 5 Gram all-reduces (73 MB) cost more than one gather (29 MB)
    assert choose(4096, 2048, 8, 5, crosses_domain=True, **kw).mode == "duplicated"
    # a square matrix moves 10x the bytes distributed; on a slow link that decides
    assert choose(2048, 2048, 8, 5, crosses_domain=True, **kw).mode == "duplicated"


def test_each_mode_prices_its_own_element_size() -> None:
    c32 = mode_costs(4096, 1024, 4, 5, ns_dtype="fp32")
    c16 = mode_costs(4096, 1024, 4, 5, ns_dtype="bf16")
    assert c16["duplicated"].bytes == c32["duplicated"].bytes  # gathers fp32 momentum
    assert c16["distributed"].bytes == pytest.approx(c32["distributed"].bytes / 2, rel=1e-6)


def test_syrk_and_cubic_flops() -> None:
    base = mode_costs(2048, 512, 2, 5)["duplicated"].flops
    syrk = mode_costs(2048, 512, 2, 5, syrk=True)["duplicated"].flops
    cubic = mode_costs(2048, 512, 2, 5, quad_steps=0)["duplicated"].flops
    assert base - syrk == 5 * 512**2 * 2048 + 5 * 512**3
    assert base - cubic == 5 * 2 * 512**3


def test_conservative_rule_without_profile() -> None:
    # aspect 8: distributed saves FLOPs but moves more bytes -> duplicated
    assert choose(8192, 1024, 4, 5).mode == "duplicated"
    # aspect 16: fewer FLOPs and fewer bytes -> distributed, unless the group crosses a domain
    assert choose(16384, 1024, 4, 5).mode == "distributed"
    assert choose(16384, 1024, 4, 5, crosses_domain=True).mode == "duplicated"
    assert choose(16384, 1024, 4, 5).basis.startswith("no profile")
    assert choose(16384, 1024, 1, 5).mode == "duplicated"  # one rank: nothing to choose


def test_registry_adapter() -> None:
    entry = {"name": "H100-SXM", "vendor": "nvidia", "peak_tflops": {"fp32": 67, "bf16": 989,
             "fp8": None}, "intra_domain_bandwidth_gbps": 450, "inter_domain_bandwidth_gbps": 50,
             "collective_latency_us": 10, "figure_kind": "datasheet"}
    p = profile_from_registry(entry)
    assert p.matmul_flops_per_s == {"fp32": 67e12, "bf16": 989e12}
    assert p.intra == Link(450e9, 10e-6) and p.inter == Link(50e9, 10e-6)
    assert p.link("all_gather", crosses_domain=True) == p.inter
    with pytest.raises(ValueError, match="collective_latency_us is missing"):
        profile_from_registry({**entry, "collective_latency_us": None})
    with pytest.raises(ValueError, match="no matmul rate for bf16"):
        mode_costs(64, 64, 2, 5, ns_dtype="bf16", profile=profile_from_registry(
            {**entry, "peak_tflops": {"fp32": 67}}))


def test_registry_profile_from_the_real_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """An H100 seen through the device seam: the registry gives the datasheet peaks and NVLink
    bandwidth, the group measurement the collective latency (no datasheet states one); on a
    small tall weight that latency term flips the choice from distributed to duplicated."""
    from orchestrator.core.errors import BackendUnavailable
    from recipes.muon.recipe import registry_profile

    fake_cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 8,
                                      get_device_name=lambda i: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(devmod, "_torch", lambda: types.SimpleNamespace(cuda=fake_cuda))
    monkeypatch.setattr(devmod, "musa_module", lambda: None)
    dev = devmod.resolve("cuda", 0)
    assert dev.name == "NVIDIA H100 80GB HBM3"

    # the H100 entry states no collective latency: without a measurement refused, not guessed
    with pytest.raises(BackendUnavailable, match="collective_latency_us is missing.*h100.yaml"):
        registry_profile(dev.name, dev.kind)
    calls: list[int] = []

    def measured(latency_s: float) -> Any:
        return lambda: calls.append(1) or latency_s

    p = registry_profile(dev.name, dev.kind, measured(20e-6))
    assert calls == [1] and p.figure_kind == "hybrid"
    assert p.matmul_flops_per_s["fp32"] == 67e12 and p.intra == Link(450e9, 20e-6)
    assert "h100" in p.name and "20.0 us: measured" in p.name
    # [4096, 128] rows split over 2 ranks: distributed halves ~22 us of fp32 NS compute but
    # needs 6 collectives to duplicated's one
    args = dict(quad_steps=5, ns_dtype="fp32", crosses_domain=False, partition_dim=0)
    with_latency = choose(4096, 128, 2, 5, profile=p, **args)
    assert with_latency.mode == "duplicated", with_latency.line()
    no_latency = choose(4096, 128, 2, 5, profile=registry_profile(dev.name, dev.kind,
                                                                   measured(0.0)), **args)
    assert no_latency.mode == "distributed", no_latency.line()
    with pytest.raises(BackendUnavailable, match="no registry entry"):
        registry_profile("Imaginary GPU 9000", "cuda")


def test_resolver_caches_and_logs_once_per_shape(caplog: pytest.LogCaptureFixture) -> None:
    r0 = ModeResolver(steps=5, quad_steps=5, ns_dtype="fp32", crosses_domain=False,
                      profile=FAST, rank=0)
    r1 = ModeResolver(steps=5, quad_steps=5, ns_dtype="fp32", crosses_domain=False,
                      profile=FAST, rank=1)
    with caplog.at_level(logging.INFO, logger="recipes.muon.cost"):
        a = r0.resolve(8192, 1024, 4, 0)
        assert r0.resolve(8192, 1024, 4, 0) is a
        r0.resolve(1024, 8192, 4, 0)
        r1.resolve(8192, 1024, 4, 0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("tp_mode auto: [8192, 1024] G=4 dim=0 -> distributed")
    assert "duplicated" in lines[0] and "ms" in lines[0]


def test_compute_curve_interpolates() -> None:
    pts = ((10.0, 1.0), (20.0, 3.0), (40.0, 5.0))
    assert [interpolate(pts, x) for x in (5, 10, 15, 30, 60)] == pytest.approx(
        [0.5, 1.0, 2.0, 4.0, 7.0])
    curved = CostProfile("c", "measured", {"fp32": 1.0}, Link(1e9, 0), Link(1e9, 0),
                         compute_curve=pts)
    assert mode_costs(4, 4, 2, 1, profile=curved)["duplicated"].compute_s == pytest.approx(
        interpolate(pts, 4 * 4**3 + 2 * 4**3))


def test_fit_line() -> None:
    assert fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((2.0, 1.0))
    assert fit_line([1, 2], [1, 3]) == pytest.approx((1.4, 0.0))  # intercept clamped at 0
    assert fit_line([1, 2], [3, 1]) == pytest.approx((0.5, 0.0))  # noise: largest point's mean


# --------------------------------------------------------------------------- topology


def test_domains_from_identities() -> None:
    assert topology.crosses(["nvml:ab:1", "nvml:ab:1"]) is False
    assert topology.crosses(["nvml:ab:1", "nvml:ab:2"]) is True
    ident = topology.host_identity("node-secret-17")
    assert ident.startswith("host:") and "secret" not in ident
    assert topology.host_identity("node-secret-17") == ident


def _fake_nvml(state: int, cluster: bytes, clique: int) -> types.SimpleNamespace:
    info = types.SimpleNamespace(clusterUuid=cluster, cliqueId=clique, state=state)
    return types.SimpleNamespace(
        nvmlInit=lambda: None, NVML_GPU_FABRIC_STATE_COMPLETED=3,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetGpuFabricInfo=lambda h: info)


def test_fabric_identity_through_the_device_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_device_properties=lambda i: types.SimpleNamespace(uuid="1234")))
    monkeypatch.setattr(devmod, "_torch", lambda: fake_torch)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", _fake_nvml(3, b"\x01" * 16, 7))
    # a clique NCCL would use: FABRIC handles can be shared (orchestrator.platform.fabric's probe)
    monkeypatch.setattr(fabric, "cuda_fabric_handle_probe", lambda i: None)
    assert devmod.fabric_identity("cuda", 0) == "nvml:" + "01" * 16 + ":7"
    assert topology.local_identity("cuda", 0).startswith("nvml:")
    # registration not complete, or no cluster: no fabric, fall back to the host
    monkeypatch.setitem(__import__("sys").modules, "pynvml", _fake_nvml(1, b"\x01" * 16, 7))
    assert devmod.fabric_identity("cuda", 0) is None
    monkeypatch.setitem(__import__("sys").modules, "pynvml", _fake_nvml(3, b"\x00" * 16, 0))
    assert topology.local_identity("cuda", 0).startswith("host:")
    # fabric info alone, where the FABRIC handle probe fails: unknown, the host decides
    monkeypatch.setitem(__import__("sys").modules, "pynvml", _fake_nvml(3, b"\x01" * 16, 7))
    monkeypatch.setattr(fabric, "cuda_fabric_handle_probe", lambda i: "probe failed")
    assert devmod.fabric_identity("cuda", 0) is None
    monkeypatch.setitem(__import__("sys").modules, "pymtml", None)
    assert devmod.fabric_identity("musa", 0) is None  # no pymtml here: unknown


def test_single_rank_never_crosses() -> None:
    assert topology.group_crosses_domain(None, "x") == (False, "single rank")
    assert topology.group_crosses_domain(None, "x", override=True) == (True, "config override")


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("override,key", [
    ("workload.tp.mode=fastest", "workload.tp.mode"),
    ("workload.tp.cost_profile=guess", "workload.tp.cost_profile"),
    ("workload.optimizer.coefficients=septic", "workload.optimizer.coefficients"),
    ("workload.world_size=3", "workload.model.d_model"),
    ("workload.model.sharding=diagonal", "workload.model.sharding"),
    ("workload.precision=bf16", "workload.precision"),
])
def test_config_errors_name_the_key(compose: Any, override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: "):
        compose(["workload=muon_tp_test", "+sweep=tp_mode", override])


def test_coefficient_set_is_chosen_by_config_and_a_bad_name_lists_the_valid_ones(compose: Any) -> None:
    for name in ("polar_express", "cans"):
        cfg = compose(["workload=muon_tp_test", "+sweep=tp_mode",
                       f"workload.optimizer.coefficients={name}"])
        assert cfg.workload.optimizer.coefficients == name
    with pytest.raises(ConfigError, match=r"^workload\.optimizer\.coefficients: 'septic' is not a "
                       r"valid choice; choose one of: simple, quintic, cubic, polar_express, cans$"):
        compose(["workload=muon_tp_test", "+sweep=tp_mode", "workload.optimizer.coefficients=septic"])


def test_sweep_may_not_touch_the_optimizer_math(compose: Any) -> None:
    with pytest.raises(ConfigError, match="frozen by invariants"):
        compose(["workload=muon_tp_test", "+sweep=tp_mode",
                 "sweep.variable=workload.optimizer.ns_steps", "sweep.baseline=5",
                 "sweep.values=[3]"])


def test_useful_flops_hand_count(compose: Any) -> None:
    """One rank: 6 x matmul weights x tokens + 12 x n_layer x seq x d_model x tokens, counted by
    hand for muon_tp_test with two experts (norms and embeddings do no matmul work)."""
    from recipes.muon.recipe import build

    cfg = compose(["workload=muon_tp_test", "workload.world_size=1",
                   "workload.model.n_experts=2", "workload.model.d_expert=16", "+sweep=tp_mode"])
    trainer = build(cfg.workload, cfg.workload.buckets[0], "cpu")
    d, ff, vocab, tokens, seq = 32, 128, 64, 2 * 32, 32
    weights = 3 * d * d + d * d + ff * d + d * ff  # qkv, proj, fc1, fc2
    weights += 2 * (16 * d + d * 16) + 2 * d + vocab * d  # experts, router, head
    assert weights == 16448
    want = 6 * weights * tokens + 12 * 1 * seq * d * tokens
    assert trainer.useful_flops_per_step() == want == 7_102_464
    assert "/ G" in trainer.useful_flops_definition and "masking not" in trainer.useful_flops_definition


def test_report_flags_auto_trials_that_chose_differently() -> None:
    from recipes.muon.report import sections

    def rec(modes: tuple[str, str]) -> dict[str, Any]:
        choices = [{"m": 96, "n": 32, "g": 2, "partition_dim": 0, "mode": modes[0],
                    "basis": "cost model", "predicted_s": {}},
                   {"m": 32, "n": 128, "g": 2, "partition_dim": 1, "mode": modes[1],
                    "basis": "cost model", "predicted_s": {}}]
        return {"status": "ok", "arm_label": "auto", "step_time_median_s": 0.01,
                "muon_tp": {"mode": "auto", "group_size": 2, "choices": choices}}

    same = "\n".join(sections([rec(("distributed", "duplicated"))] * 2)[0][1])
    assert "all 2 trials chose the same mode" in same and "chose differently" not in same
    mixed = "\n".join(sections([rec(("distributed", "duplicated")),
                                rec(("duplicated", "duplicated")),
                                rec(("distributed", "duplicated"))])[0][1])
    assert "trials chose differently" in mixed
    assert "- [96, 32] dim 0: distributed in 2, duplicated in 1" in mixed
    assert "[32, 128]" not in mixed.split("chose differently")[1]
