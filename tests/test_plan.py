from orchestrator.plan import plan


def test_interleaved_and_reversed_every_other_round() -> None:
    p = plan(["a0", "a1", "a2"], ["s", "l"], 3)
    order = [(t.round, t.bucket, t.arm_id) for t in p]
    assert order == [
        (0, "s", "a0"), (0, "s", "a1"), (0, "s", "a2"),
        (0, "l", "a0"), (0, "l", "a1"), (0, "l", "a2"),
        (1, "s", "a2"), (1, "s", "a1"), (1, "s", "a0"),
        (1, "l", "a2"), (1, "l", "a1"), (1, "l", "a0"),
        (2, "s", "a0"), (2, "s", "a1"), (2, "s", "a2"),
        (2, "l", "a0"), (2, "l", "a1"), (2, "l", "a2"),
    ]
    assert [t.position for t in p] == list(range(18))
    assert len({t.trial_id for t in p}) == 18


def test_no_reversal_when_disabled() -> None:
    p = plan(["a0", "a1"], ["s"], 2, reverse_every_other_round=False)
    assert [t.arm_id for t in p] == ["a0", "a1", "a0", "a1"]


def test_trial_ids_are_stable_and_path_safe() -> None:
    a = plan(["a0", "a1"], ["seq 128/x"], 2)
    b = plan(["a0", "a1"], ["seq 128/x"], 2)
    assert [t.trial_id for t in a] == [t.trial_id for t in b]
    assert all("/" not in t.trial_id and " " not in t.trial_id for t in a)


def test_adaptive_extension_keeps_interleaving_reversal_and_ids() -> None:
    from orchestrator.plan import next_rounds, plan_rounds

    first = plan(["a0", "aa", "a1", "a2"], ["s"], 3)
    ext = plan_rounds(["a0", "aa", "a2"], ["s"], next_rounds(3, 9, 2), start_position=len(first))
    assert [(t.round, t.arm_id) for t in ext] == [
        (3, "a2"), (3, "aa"), (3, "a0"), (4, "a0"), (4, "aa"), (4, "a2")]
    assert [t.position for t in ext] == list(range(12, 18))
    assert ext[0].trial_id == "r003-s-a2"
    assert next_rounds(8, 9, 2) == [8] and next_rounds(9, 9, 2) == []


def test_more_rounds_reason_rules() -> None:
    from orchestrator.plan import ArmProgress, more_rounds_reason

    def why(verdict: str, iv: tuple[float, float, float, float], done: int = 3,
            n: int | None = None, timing: bool = True) -> str:
        return more_rounds_reason(ArmProgress("a1", verdict, timing, (iv,), n), done, 9, 0.03)

    # straddles the threshold 1.03 with the effect above it: more rounds
    assert "straddles" in why("inconclusive", (1.05, 1.01, 1.09, 1.03))
    # straddles 1 with the effect below it: more rounds
    assert why("inconclusive", (0.98, 0.95, 1.01, 1.03))
    # the cap is reached, or a gate/failure decided: no
    assert not why("inconclusive", (1.05, 1.01, 1.09, 1.03), done=9)
    assert not why("reject", (1.05, 1.01, 1.09, 1.03), timing=False)
    # between 1 and T with the whole interval under T: no decisive verdict in reach
    assert not why("inconclusive", (1.01, 0.995, 1.025, 1.03))
    # futile: the estimate needs far more rounds than the cap allows
    assert not why("inconclusive", (0.995, 0.95, 1.02, 1.03), n=500)
    # decisive but on a gain under 3 %: confirm; a large decisive gain: stop
    assert "confirming" in why("retain", (1.025, 1.021, 1.03, 1.02))
    assert not why("retain", (1.10, 1.05, 1.15, 1.02))
    assert not why("reject", (0.90, 0.85, 0.95, 1.02))


def test_control_arm_copies_the_baseline() -> None:
    from orchestrator.plan import AA_ARM_ID, control_arm
    from orchestrator.sweep import Arm

    base = Arm("a0", "sdpa", {"k": 1}, True, {"workload.x": 1}, {"E": "1"})
    aa = control_arm(base)
    assert aa.arm_id == AA_ARM_ID and not aa.is_baseline
    assert aa.overrides == base.overrides and aa.env == base.env and "A/A" in aa.label


def test_decisive_verdicts_before_the_median_interval_rounds_are_confirmed() -> None:
    from orchestrator.plan import ArmProgress, more_rounds_reason

    def why(verdict: str, done: int, need: int) -> str:
        iv = (0.80, 0.70, 0.90, 1.02)  # a large, decisive slowdown
        return more_rounds_reason(ArmProgress("a1", verdict, True, (iv,)), done, 9, 0.03, need)

    assert "after 3 rounds, fewer than the 6" in why("reject", 3, 6)
    assert "confirming" in why("retain", 5, 6)
    assert not why("reject", 6, 6)  # enough rounds: decided
    assert not why("reject", 3, 0)  # no minimum asked (the fixed protocols)
    assert not why("reject", 9, 12)  # the cap wins
