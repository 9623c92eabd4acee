from orchestrator.spec.plan import plan


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
    from orchestrator.spec.plan import next_rounds, plan_rounds

    first = plan(["a0", "aa", "a1", "a2"], ["s"], 3)
    ext = plan_rounds(["a0", "aa", "a2"], ["s"], next_rounds(3, 9, 2), start_position=len(first))
    assert [(t.round, t.arm_id) for t in ext] == [
        (3, "a2"), (3, "aa"), (3, "a0"), (4, "a0"), (4, "aa"), (4, "a2")]
    assert [t.position for t in ext] == list(range(12, 18))
    assert ext[0].trial_id == "r003-s-a2"
    assert next_rounds(8, 9, 2) == [8] and next_rounds(9, 9, 2) == []


def test_more_rounds_reason_rules() -> None:
    from orchestrator.spec.plan import ArmProgress, more_rounds_reason

    def why(verdict: str, done: int = 3, n: int | None = 9, timing: bool = True,
            calibration: str = "") -> str:
        return more_rounds_reason(ArmProgress("a1", verdict, timing, n), done, 7, calibration)

    # undecided with a decision on the objective within reach: more rounds
    assert "~9 rounds" in why("inconclusive")
    # futile: no decision within reach (decide.REACH x max_rounds): stop
    assert not why("inconclusive", n=None)
    # sequential stopping: a decided variant drops out, whatever its effect
    for v in ("retain", "reject", "equivalent"):
        assert not why(v)
    # the cap is reached, or a gate or a failure decided: no
    assert not why("inconclusive", done=7)
    assert not why("reject", timing=False)
    assert not why("invalid")
    # an A/A control that does not cover 1 keeps every timing-based variant going
    assert "A/A control" in why("retain", calibration="off")
    assert not why("retain", done=7, calibration="off")


def test_control_arm_copies_the_baseline() -> None:
    from orchestrator.spec.plan import AA_ARM_ID, control_arm
    from orchestrator.spec.sweep import Arm

    base = Arm("a0", "sdpa", {"k": 1}, True, {"workload.x": 1}, {"E": "1"})
    aa = control_arm(base)
    assert aa.arm_id == AA_ARM_ID and not aa.is_baseline
    assert aa.overrides == base.overrides and aa.env == base.env and "A/A" in aa.label
