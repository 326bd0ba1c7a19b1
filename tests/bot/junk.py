"""Junk Telegram updates (issue 16): hypothesis strategies, a fake Bot API that relays
them, and the checks every reply must pass.

The strategies build update *bodies* (the fake assigns ``update_id``; update ids are the
poller's business, tested there). Three families:

* ``wellformed_message`` — a private text message from an allowed user, possibly with junk
  in its optional fields (entities, location, photo, names, chat type, reply, topic...)
  and lone surrogates in its text; it must be answered, once. Its text starts with a
  ``{token}`` placeholder that ``stamp`` fills with a unique token the echo carries.
* ``callback_query`` — a callback query with any data (and junk sender and message); it
  must get exactly one ``answerCallbackQuery``. Its id is stamped unique.
* ``junk_update`` — messages with junk in any field (chat, sender, ids, text, commands
  with junk arguments) and random JSON in and around update kinds; the service must
  survive them and never show an exception. A random callback query with a string id
  must still be answered once.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fakes.telegram_server import FakeTelegramServer

Json = dict[str, Any]

# --- what no reply may contain ----------------------------------------------------------

EXCEPTION_NAME = re.compile(r"\b[A-Z][a-zA-Z]*(Error|Exception)\b")


def exception_texts(texts: Sequence[str]) -> list[str]:
    """The texts that show a Python exception's name or a traceback."""
    return [t for t in texts if EXCEPTION_NAME.search(t) or "Traceback" in t]


# Methods whose text a person sees, and the parameter that carries it.
SHOWN = {
    "sendMessage": "text",
    "editMessageText": "text",
    "sendMessageDraft": "text",
    "sendDocument": "caption",
    "answerCallbackQuery": "text",
}


def everything_shown(telegram: FakeTelegramServer) -> list[str]:
    """Every text the bot sent or tried to send to anyone (refused sends included)."""
    shown: list[str] = []
    for call in telegram.calls:
        key = next((k for m, k in SHOWN.items() if m.lower() == call.method.lower()), None)
        if key is not None and call.params.get(key):
            shown.append(str(call.params[key]))
    return shown


# --- a fake Bot API that relays junk ----------------------------------------------------


class JunkTelegramServer(FakeTelegramServer):
    """The fake Bot API, relaying any update body as Telegram would relay it.

    The fake remembers pushed messages, and builds its answers to later replies and edits
    from them; only a well-formed one is remembered, as Telegram's own answers are always
    well-formed. A pushed callback query with a string id is registered, so that its
    answer is accepted (and recorded in ``callback_answers``).
    """

    def _remember(self, message: Json) -> None:  # lock held
        chat = message.get("chat")
        if (
            isinstance(chat, dict)
            and type(chat.get("id")) is int
            and chat.get("type") in ("private", "group", "supergroup", "channel")
            and type(message.get("message_id")) is int
        ):
            super()._remember(message)

    def push_update(self, update: Json) -> Json:
        query = update.get("callback_query")
        if isinstance(query, dict) and isinstance(query.get("id"), str):
            with self._lock:
                self._callbacks.add(query["id"])
        return super().push_update(update)

    def pending_count(self) -> int:
        """Updates not yet confirmed by an offset (without copying them)."""
        with self._lock:
            return len(self._updates)


# --- scalars and random JSON --------------------------------------------------------------

# Characters JSON can carry that every encoder downstream refuses, or PostgreSQL does.
BAD_CHARACTERS = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\x00"])
JUNK_TEXT = st.lists(
    st.one_of(st.characters(exclude_categories=[]), BAD_CHARACTERS), max_size=30
).map("".join)
BIG_INTS = st.sampled_from([2**63 - 1, 2**63, 2**64 + 1, -(2**63) - 1, int("9" * 58), -1, 0])
INTS = st.one_of(st.integers(-(2**40), 2**40), BIG_INTS)
# Field names of the Bot API, so that random JSON lands where the parser looks.
FIELD_NAMES = st.sampled_from(
    [
        "message_id",
        "from",
        "chat",
        "id",
        "type",
        "text",
        "entities",
        "caption",
        "caption_entities",
        "photo",
        "document",
        "location",
        "reply_to_message",
        "message_thread_id",
        "is_topic_message",
        "data",
        "message",
        "offset",
        "length",
        "user",
        "file_id",
        "file_size",
        "latitude",
        "longitude",
        "first_name",
        "username",
        "callback_query",
        "edited_message",
    ]
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=False, allow_infinity=False),  # NaN is not JSON
    JUNK_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(FIELD_NAMES, JUNK_TEXT), inner, max_size=4),
    ),
    max_leaves=10,
)

# --- entities, locations, files, replies: junk shaped like the real thing -----------------

SMALL = st.one_of(st.integers(-3, 40), JSON_SCALARS)
ENTITY_TYPES = st.one_of(
    st.sampled_from(["bold", "mention", "text_mention", "bot_command", "pre", "url"]), JSON_SCALARS
)
ENTITY = st.fixed_dictionaries(
    {"type": ENTITY_TYPES, "offset": SMALL, "length": SMALL},
    optional={"user": JSON_VALUES, "url": JSON_SCALARS, "language": JSON_SCALARS},
)
ENTITIES = st.one_of(st.lists(st.one_of(ENTITY, JSON_SCALARS), max_size=4), JSON_VALUES)
LOCATION = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "latitude": st.one_of(st.floats(-100, 100), JSON_SCALARS),
            "longitude": st.one_of(st.floats(-200, 200), JSON_SCALARS),
        },
    ),
    JSON_VALUES,
)
FILE = st.fixed_dictionaries(
    {},
    optional={
        "file_id": st.one_of(st.sampled_from(["f1", "f2", ""]), JSON_SCALARS),
        "file_unique_id": JSON_SCALARS,
        "file_name": JSON_SCALARS,
        "mime_type": JSON_SCALARS,
        "file_size": st.one_of(st.sampled_from([10, 2**40]), JSON_SCALARS),
        "width": SMALL,
        "height": SMALL,
    },
)
PHOTO = st.one_of(st.lists(st.one_of(FILE, JSON_SCALARS), max_size=3), JSON_VALUES)
REPLY = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "message_id": SMALL,
            "from": st.one_of(st.fixed_dictionaries({"id": INTS}), JSON_VALUES),
        },
    ),
    JSON_VALUES,
)
NAMES = st.fixed_dictionaries(
    {},
    optional={
        "first_name": st.one_of(JUNK_TEXT, JSON_SCALARS),
        "last_name": st.one_of(JUNK_TEXT, JSON_SCALARS),
        "username": st.one_of(JUNK_TEXT, JSON_SCALARS),
        "is_bot": JSON_SCALARS,
        "language_code": JSON_VALUES,
    },
)
# A chat type that is junk, never a group type: a well-formed message stays private.
JUNK_CHAT_TYPE = st.one_of(st.just("private"), JSON_SCALARS).filter(
    lambda v: v not in ("group", "supergroup", "channel")
)


OPTIONAL_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "entities": ENTITIES,
    "caption": JSON_SCALARS,
    "caption_entities": ENTITIES,
    "reply_to_message": REPLY,
    "is_topic_message": JSON_SCALARS,
    "message_thread_id": SMALL,
    "location": LOCATION,
    "photo": PHOTO,
    "document": st.one_of(FILE, JSON_VALUES),
    "date": JSON_SCALARS,
    "forward_origin": JSON_VALUES,
    "via_bot": JSON_VALUES,
    "sticker": JSON_VALUES,
}


def junk_message_fields() -> st.SearchStrategy[Json]:
    """Junk for the optional fields of a message (never text, chat, sender or id)."""
    return st.fixed_dictionaries({}, optional=OPTIONAL_FIELDS)


# --- the three families ---------------------------------------------------------------------


def mostly(valid: st.SearchStrategy[Any], junk: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` three times in four: junk in some fields, not in all of them at once.

    (``one_of(valid, valid, valid, junk)`` would not do: ``one_of`` drops repeats.)
    """
    return st.integers(0, 3).flatmap(lambda n: junk if n == 3 else valid)  # draws lean to 0


TOKEN = "{token}"  # replaced by ``stamp``
CALLBACK_ID = "{callback}"


@dataclass(frozen=True)
class Users:
    """Disjoint sets of senders, so that junk never lands in a well-formed chat."""

    wellformed: Sequence[int]  # allowed; only well-formed messages in their chats
    junk: Sequence[int]  # allowed too (junk reaches commands and the hub through them)
    strangers: Sequence[int]
    owner: int


def wellformed_message(users: Users) -> st.SearchStrategy[Json]:
    def build(user: int, tail: str, fields: Json, names: Json, chat_type: Any) -> Json:
        message = {
            **fields,
            "message_id": 0,  # stamped
            "date": 1_700_000_000,
            "from": {**names, "id": user},
            "chat": {"id": user, "type": chat_type},
            "text": f"{TOKEN} {tail}",  # the token first: never a command, always shown
        }
        return {"message": message}

    return st.builds(
        build,
        st.sampled_from(users.wellformed),
        JUNK_TEXT,
        junk_message_fields(),
        NAMES,
        JUNK_CHAT_TYPE,
    )


def callback_data() -> st.SearchStrategy[Any]:
    """Whatever a button can carry, and what no button should."""
    ids = mostly(
        st.one_of(st.integers(1, 50).map(str), BIG_INTS.map(str)),
        st.one_of(
            st.sampled_from(["", "-5", "+5", "05", "5.0", "٥", " 5", "0x10", "1e3"]), JUNK_TEXT
        ),
    )
    choices = mostly(st.sampled_from(["a", "r", "t", "s", "p", "d"]), JUNK_TEXT)
    prefixes = st.sampled_from(["ap1", "ap1", "ap1", "jb1", "jb1", "ap2", "AP1", "", "q1"])
    shaped = st.builds(lambda p, i, c: f"{p}:{i}:{c}", prefixes, ids, choices)
    return mostly(
        shaped,
        st.one_of(
            st.builds(lambda s: s + ":extra", shaped),
            st.just("ap1:" + "9" * 58 + ":a"),  # the chaos run's three
            st.just(f"ap1:{2**64 + 1}:a"),
            st.just(f"ap1:{2**63}:a"),
            st.just("x" * 300),  # oversized
            st.just(""),
            JUNK_TEXT,
            JSON_VALUES,  # not even a string
        ),
    )


def callback_query(users: Users) -> st.SearchStrategy[Json]:
    everyone = [*users.junk, *users.strangers, users.owner]
    senders = mostly(
        st.sampled_from(everyone).map(lambda u: {"id": u, "first_name": "Tapper"}), JSON_VALUES
    )
    messages = mostly(
        st.builds(
            lambda chat, message_id: {"message_id": message_id, "chat": {"id": chat}},
            st.sampled_from(everyone),
            SMALL,
        ),
        JSON_VALUES,
    )

    def build(sender: Any, message: Any, data: Any, keep: Sequence[str]) -> Json:
        query = {"id": CALLBACK_ID, "from": sender, "message": message, "data": data}
        return {"callback_query": {k: v for k, v in query.items() if k in keep or k == "id"}}

    every = ["data", "from", "message"]
    kept = mostly(st.just(every), st.sets(st.sampled_from(every)).map(sorted))
    return st.builds(build, senders, messages, callback_data(), kept)


COMMAND_TEXTS = st.one_of(
    st.builds(
        lambda name, arg: f"/{name} {arg}",
        st.sampled_from(
            [
                "model",
                "unpair",
                "pair",
                "models",
                "context",
                "cost",
                "compact",
                "jobs",
                "help",
                "start",
                "stop",
                "new",
                "resettools",
                "sethome",
                "nonsense",
                "model@other_bot",
            ]
        ),
        st.one_of(
            st.sampled_from(["²", "٥", "1", "0", "-1", "9" * 30, "9" * 5000, "auto", ""]),
            JUNK_TEXT,
        ),
    ),
    st.sampled_from(["/", "//", "/@", "/ ", "/\ud800"]),
)


def junk_message(users: Users) -> st.SearchStrategy[Json]:
    """A message-shaped body with junk anywhere, essential fields included."""
    senders = [*users.junk, *users.strangers, users.owner]
    user_ids = mostly(st.sampled_from(senders), st.one_of(INTS, JSON_SCALARS))
    chat_ids = mostly(
        st.one_of(st.sampled_from(senders), st.sampled_from([-100_200, -100_300])),
        st.one_of(INTS, JSON_SCALARS),
    )
    chat_types = st.one_of(st.sampled_from(["private", "group", "supergroup"]), JSON_SCALARS)
    chats = mostly(
        st.fixed_dictionaries({"id": chat_ids}, optional={"type": chat_types}), JSON_VALUES
    )
    senders_json = mostly(
        st.builds(lambda user, names: {**names, "id": user}, user_ids, NAMES), JSON_VALUES
    )
    texts = mostly(
        st.one_of(COMMAND_TEXTS, JUNK_TEXT, st.just("@chathub_test_bot hi")), JSON_SCALARS
    )

    def build(
        sender: Any, chat: Any, message_id: Any, text: Any, fields: Json, drop: Sequence[str]
    ) -> Json:
        message = {**fields, "message_id": message_id, "from": sender, "chat": chat, "text": text}
        return {"message": {k: v for k, v in message.items() if k not in drop}}

    return st.builds(
        build,
        senders_json,
        chats,
        mostly(st.integers(1, 10**6), JSON_SCALARS),
        texts,
        junk_message_fields(),
        st.sets(st.sampled_from(["from", "chat", "message_id", "text"]), max_size=1).map(sorted),
    )


def junk_update(users: Users) -> st.SearchStrategy[Json]:
    keys = st.one_of(FIELD_NAMES, JUNK_TEXT).filter(lambda k: k != "update_id")
    kinds = st.sampled_from(["message", "edited_message", "callback_query", "channel_post", "poll"])
    return st.one_of(
        junk_message(users),
        junk_message(users).map(lambda body: {"edited_message": body["message"]}),
        st.builds(lambda kind, value: {kind: value}, kinds, JSON_VALUES),
        st.dictionaries(keys, JSON_VALUES, max_size=3),
    )


# --- drawing, stamping, and what each update expects ------------------------------------------


@dataclass(frozen=True)
class Stamped:
    """An update body ready to push, and what must come of it."""

    body: Json
    expect: Literal["reply", "answer", "nothing"]
    key: str = ""  # the reply's token, or the callback query id
    chat_id: int = 0


def draw(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` examples of ``strategy``, the same ones on every run (derandomized).

    Hypothesis's generation phase only: the examples are pushed through one running
    service afterwards (a service per example would cost a start each), and a failing
    update is reported as it is.
    """
    drawn: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(copy.deepcopy(value))

    collect()
    return drawn


def stamp(body: Json, serial: int) -> Stamped:
    """Fill the placeholders with unique values; say what the update must produce."""
    body = copy.deepcopy(body)
    message = body.get("message")
    if (
        isinstance(message, dict)
        and isinstance(message.get("text"), str)
        and TOKEN in message["text"]
    ):
        token = f"T{serial}Z"
        message["text"] = message["text"].replace(TOKEN, token, 1)
        message["message_id"] = serial
        return Stamped(body, "reply", token, message["chat"]["id"])
    query = body.get("callback_query")
    if isinstance(query, dict) and query.get("id") == CALLBACK_ID:
        query["id"] = f"q{serial}"
        return Stamped(body, "answer", query["id"])
    if isinstance(query, dict) and isinstance(query.get("id"), str) and query["id"]:
        query["id"] = f"r{serial}"  # a random query with an id: answered too, once
        return Stamped(body, "answer", query["id"])
    return Stamped(body, "nothing")


def generate_updates(users: Users, count: int, *, pool: int) -> list[Stamped]:
    """``count`` stamped updates, a third of each family, the same on every run.

    Hypothesis draws ``pool`` examples of each family (about 3 ms each: drawing all
    ``count`` would take longer than pushing them through the service); update ``n`` is
    example ``n`` of its family with the optional fields of another example, so the
    combinations keep changing past the pool.
    """
    families = [
        draw(wellformed_message(users), pool),
        draw(callback_query(users), pool),
        draw(junk_update(users), pool),
    ]
    bodies = []
    for serial in range(count):
        family = families[serial % 3]
        index = serial // 3
        body = family[index % len(family)]
        donor = family[(index * 7 + index // len(family)) % len(family)]
        bodies.append(stamp(recombine(body, donor), serial + 1))
    return bodies


def recombine(body: Json, donor: Json) -> Json:
    """``body`` with the optional message fields (or callback data) of ``donor``."""
    body = copy.deepcopy(body)
    for kind in ("message", "edited_message"):
        message, other = body.get(kind), donor.get(kind)
        if isinstance(message, dict) and isinstance(other, dict):
            for key in OPTIONAL_FIELDS:
                message.pop(key, None)
                if key in other:
                    message[key] = copy.deepcopy(other[key])
    query, other = body.get("callback_query"), donor.get("callback_query")
    if isinstance(query, dict) and isinstance(other, dict) and "data" in other:
        query["data"] = copy.deepcopy(other["data"])
    return body


def answers_by_id(telegram: FakeTelegramServer) -> dict[str, int]:
    """How many answerCallbackQuery calls each callback query id got."""
    counts: dict[str, int] = {}
    for call in telegram.calls_to("answerCallbackQuery"):
        key = str(call.params.get("callback_query_id"))
        counts[key] = counts.get(key, 0) + 1
    return counts


def replies_with(telegram: FakeTelegramServer, chat_id: int, needle: str) -> int:
    return sum(needle in (m.text or "") for m in telegram.messages(chat_id))
