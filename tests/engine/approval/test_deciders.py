"""Who may decide an approval (issue 17, hole 1): the policy every surface is to call."""

from __future__ import annotations

import pytest

from engine.approval.deciders import Decider, Requester, refusal, who_may_decide
from engine.config import ConfigError, load_settings

ALICE = Requester("11", "Alice")
alice = Decider("11", is_allowed=True)
bob = Decider("22", is_allowed=True)  # another allowed member of the group
owner = Decider("1", is_owner=True, is_allowed=True)
nobody = Decider(None)  # a tap with no sender


@pytest.mark.parametrize(
    ("policy", "decider", "requester", "expected"),
    [
        ("requester+owner", bob, ALICE, "Only Alice (who asked) or the owner can decide this."),
        ("requester+owner", alice, ALICE, None),
        ("requester+owner", owner, ALICE, None),
        ("requester+owner", nobody, ALICE, "Only Alice (who asked) or the owner can decide this."),
        ("requester+owner", bob, None, "Only the owner can decide this."),  # tic / cron card
        ("requester+owner", owner, None, None),
        ("owner", alice, ALICE, "Only the owner can decide this."),
        ("owner", bob, ALICE, "Only the owner can decide this."),
        ("owner", owner, ALICE, None),
        ("allowed", bob, ALICE, None),
        ("allowed", alice, ALICE, None),
        ("allowed", owner, None, None),
        ("allowed", bob, None, None),  # background card under `allowed`
        ("allowed", nobody, ALICE, "Only allowed members can decide this."),
        ("allowed", Decider("33"), ALICE, "Only allowed members can decide this."),
    ],
)
def test_who_may_decide(
    policy: str, decider: Decider, requester: Requester | None, expected: str | None
) -> None:
    assert refusal(policy, decider, requester) == expected


def test_an_unnamed_requester_is_named_by_id() -> None:
    assert refusal("requester+owner", bob, Requester("11")) == (
        "Only user 11 (who asked) or the owner can decide this."
    )


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="APPROVERS"):
        refusal("everyone", owner, ALICE)


def test_the_card_line() -> None:
    assert who_may_decide("requester+owner", ALICE) == "Alice (who asked) or the owner can decide."
    assert who_may_decide("requester+owner", None) == "Only the owner can decide."
    assert who_may_decide("owner", ALICE) == "Only the owner can decide."
    assert who_may_decide("allowed", ALICE) == "Any allowed member can decide."


def test_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPROVERS", raising=False)
    assert load_settings(_env_file=None).approvers == "requester+owner"
    for value in ("owner", "allowed", "requester+owner"):
        monkeypatch.setenv("APPROVERS", value)
        assert load_settings(_env_file=None).approvers == value
    monkeypatch.setenv("APPROVERS", "everyone")
    with pytest.raises(ConfigError) as refused:
        load_settings(_env_file=None)
    assert str(refused.value).startswith("APPROVERS: ")


def test_a_long_id_is_the_requester_as_stored() -> None:
    """The requester's id is stored in 64 characters; a bridged Matrix user's runs longer
    and was refused their own card and answer (until 2026-12-07; found by review)."""
    long_id = "@" + "telegram_123456789_" * 5 + ":bridge.example.org"
    stored = Requester(long_id[:64], "Dana")
    assert refusal("requester+owner", Decider(long_id, is_allowed=True), stored) is None
    other = Decider(long_id[:63] + "x" + long_id[64:], is_allowed=True)
    assert refusal("requester+owner", other, stored) is not None
