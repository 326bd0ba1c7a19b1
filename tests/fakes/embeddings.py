"""Deterministic embeddings that know a little about meaning, for the fake OpenAI server.

A text's vector is a bag of features hashed into ``DIMENSIONS`` signed buckets: each
content word is a feature, and a word in one of ``CONCEPTS``' synonym groups is also that
group's concept, weighed more. So "where are we staying in Portugal" and "the hotel in
Lisbon" share two concepts and no word: the one thing a real embedding model adds over
full text, made repeatable. Stop words carry nothing.
"""

from __future__ import annotations

import hashlib
import math
import re

__all__ = ["CONCEPTS", "DIMENSIONS", "embed"]

DIMENSIONS = 256
CONCEPT_WEIGHT = 3.0

#: Synonym groups: every word of a group stands for the group's first word too.
CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("hotel", "stay", "staying", "accommodation", "lodging", "lodge", "inn"),
    ("lisbon", "portugal", "portuguese"),
    ("meat", "fish", "animal", "beef", "chicken", "pork"),
    ("recipe", "recipes", "dish", "dishes", "meal", "meals", "eat", "eating", "cook"),
    ("vegetarian", "vegan", "plant-based"),
    ("sister", "brother", "sibling"),
    ("birthday", "born", "birth"),
    ("migration", "migrate", "upgrade", "move", "moving"),
    ("postgresql", "postgres", "pg"),
    ("dog", "puppy", "beagle", "hound", "pet"),
    ("called", "name", "named", "call"),
    ("cabinets", "cabinet", "cupboards", "cupboard"),
    ("paint", "colour", "color", "blue", "hue"),
    ("cabin", "chalet", "cottage", "hut"),
    ("wifi", "internet", "network"),
    ("marathon", "race", "run", "running"),
    ("berlin", "germany", "german"),
    ("aiming", "goal", "target", "aim"),
    ("time", "clock", "zone", "timezone"),
    ("rome", "italy", "italian", "europe"),
    ("invoice", "bill", "payment", "pay"),
    ("consulting", "client", "customer"),
    ("due", "deadline"),
    ("penicillin", "antibiotic", "antibiotics", "amoxicillin"),
    ("allergic", "allergy", "sick", "reaction"),
    ("tomatoes", "basil", "zucchini", "vegetables", "herbs"),
    ("garden", "yard", "backyard"),
    ("planted", "grow", "growing", "plant"),
    ("novel", "book", "books"),
    ("favourite", "favorite", "love", "best"),
    ("car", "vehicle", "toyota", "automobile"),
    ("service", "maintenance", "mechanic", "garage"),
    ("project", "software", "program"),
    ("board", "directors", "executives"),
    ("meeting", "gather", "meet"),
    ("quarterly", "quarter"),
    ("bike", "bicycle", "cycle"),
    ("lock", "padlock"),
    ("combination", "code", "pin"),
    ("grandma", "grandmother", "granny", "nana"),
    ("lasagna", "pasta", "spaghetti"),
    ("flight", "plane", "airplane", "fly"),
    ("tokyo", "japan", "japanese"),
    ("answers", "replies", "reply", "responses"),
    ("bullet", "points", "format", "formatted", "list"),
)
_CONCEPT_OF = {word: group[0] for group in CONCEPTS for word in group}
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "did",
        "do",
        "does",
        "for",
        "from",
        "get",
        "has",
        "have",
        "how",
        "i",
        "i'm",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "there",
        "this",
        "to",
        "up",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
_WORD = re.compile(r"[\w'-]+")


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.sha256(feature.encode()).digest()
    return int.from_bytes(digest[:4], "little") % DIMENSIONS, 1.0 if digest[4] & 1 else -1.0


def embed(text: str) -> list[float]:
    """``text``'s unit vector of ``DIMENSIONS`` floats (the same text, the same vector)."""
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        word = word.strip("'-")
        if not word or word in _STOP:
            continue
        index, sign = _bucket("w:" + word)
        vector[index] += sign
        concept = _CONCEPT_OF.get(word) or _CONCEPT_OF.get(word.rstrip("s"))
        if concept is not None:
            index, sign = _bucket("c:" + concept)
            vector[index] += sign * CONCEPT_WEIGHT
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:  # nothing but stop words: one fixed direction
        vector[0] = norm = 1.0
    return [x / norm for x in vector]
