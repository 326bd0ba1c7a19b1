"""Who may decide an approval: the one rule every surface is meant to call (issue 17, hole 1).

``APPROVERS`` is ``requester+owner`` (default), ``owner`` or ``allowed``. The *requester* is
the user whose message started the turn that raised the call (``None`` for a background
session: tic, cron); the *owner* is ``TELEGRAM_OWNER_ID``, and the operator of the web inbox,
the JSON API and the local terminal. The model is never a decider.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APPROVER_POLICIES", "Decider", "Requester", "refusal", "who_may_decide"]

APPROVER_POLICIES = ("requester+owner", "owner", "allowed")


@dataclass(frozen=True, slots=True)
class Decider:
    """Who taps or posts a decision. ``user_id=None``: no sender (refused unless the owner)."""

    user_id: int | None
    is_owner: bool = False
    is_allowed: bool = False


@dataclass(frozen=True, slots=True)
class Requester:
    user_id: int
    name: str = ""


def refusal(policy: str, decider: Decider, requester: Requester | None) -> str | None:
    """``None``: the decider may decide; otherwise the sentence to show (nothing runs)."""
    if policy not in APPROVER_POLICIES:
        raise ValueError(f"APPROVERS: unknown value {policy!r}")
    if decider.is_owner:
        return None
    if policy == "allowed":
        if decider.is_allowed and decider.user_id is not None:
            return None
        return "Only allowed members can decide this."
    if policy == "owner" or requester is None:
        return "Only the owner can decide this."
    if decider.user_id is not None and decider.user_id == requester.user_id:
        return None
    who = requester.name or f"user {requester.user_id}"
    return f"Only {who} (who asked) or the owner can decide this."


def who_may_decide(policy: str, requester: Requester | None) -> str:
    """The card's line: who may decide it."""
    if policy == "allowed":
        return "Any allowed member can decide."
    if policy == "owner" or requester is None:
        return "Only the owner can decide."
    who = requester.name or f"user {requester.user_id}"
    return f"{who} (who asked) or the owner can decide."
