"""Who may decide an approval: the one rule every surface is meant to call (issue 17, hole 1).

``APPROVERS`` is ``requester+owner`` (default), ``owner`` or ``allowed``. The *requester* is
the sender of the last person's message before the call (recorded with the approval;
``None`` for a background session: tic, cron); the *owner* is ``TELEGRAM_OWNER_ID``, and the
operator of the web inbox, the JSON API and the local terminal (``OPERATOR``). The model is
never a decider: no tool reaches a decision. ``ApprovalBroker`` applies the rule inside the
transaction that records a decision, for every surface.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.store.inbox import REQUESTER_ID_CHARS, ApprovalRecord

__all__ = [
    "APPROVER_POLICIES",
    "OPERATOR",
    "Decider",
    "Requester",
    "decides_every_call",
    "refusal",
    "requester_of",
    "who_may_decide",
]

APPROVER_POLICIES = ("requester+owner", "owner", "allowed")


@dataclass(frozen=True, slots=True)
class Decider:
    """Who taps or posts a decision. ``user_id`` is the platform's user id as an opaque
    string; ``None``: no sender (refused unless the owner)."""

    user_id: str | None
    is_owner: bool = False
    is_allowed: bool = False


#: The web inbox, the JSON API and the terminal: whoever holds the service's keys.
OPERATOR = Decider(None, is_owner=True)


@dataclass(frozen=True, slots=True)
class Requester:
    user_id: str
    name: str = ""


def requester_of(record: ApprovalRecord | None) -> Requester | None:
    if record is None or not record.requester_id:
        return None
    return Requester(record.requester_id, record.requester_name or "")


def decides_every_call(policy: str, decider: Decider) -> bool:
    """Whether ``decider`` may decide any call, whoever asked: only such a decider's
    bypass covers everyone's calls (a requester's covers their own)."""
    if decider.is_owner:
        return True
    return policy == "allowed" and decider.is_allowed and decider.user_id is not None


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
    # As stored: a longer id (a bridged Matrix user's) is its first characters there.
    if decider.user_id is not None and decider.user_id[:REQUESTER_ID_CHARS] == requester.user_id:
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
