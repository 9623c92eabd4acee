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
