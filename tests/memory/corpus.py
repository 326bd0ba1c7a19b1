"""A fixed corpus for search quality: 20 messages to find (each with a query that asks for
it in other words) among 200+ that share much of their vocabulary."""

from __future__ import annotations

from itertools import cycle, islice

#: (the message to find, a query asking for it)
NEEDLES: tuple[tuple[str, str], ...] = (
    (
        "For the Lisbon trip in March we decided to book the hotel near Alfama, the one "
        "with the rooftop terrace.",
        "which hotel did we pick for Lisbon",
    ),
    ("I'm vegetarian, so please never suggest recipes with meat or fish.", "vegetarian recipes"),
    ("My sister Clara's birthday is on the 14th of July; she loves orchids.", "Clara birthday"),
    (
        "The database migration to PostgreSQL 16 is scheduled for the weekend of the 9th.",
        "when is the postgresql migration",
    ),
    ("My dog is called Biscuit, a three year old beagle.", "what's my dog called"),
    (
        "We chose the blue paint, Hague Blue, for the kitchen cabinets.",
        "paint colour for the kitchen cabinets",
    ),
    (
        "The wifi password at the cabin is on the fridge; the network is called PineHollow.",
        "cabin wifi network",
    ),
    (
        "I run the half marathon in Berlin on April 6th, aiming for under two hours.",
        "berlin marathon target",
    ),
    ("My time zone is Europe/Rome and I usually wake at 6:30.", "which time zone am I in"),
    (
        "The invoice for the Acme consulting project was sent on the 3rd and is due in 30 days.",
        "when is the acme invoice due",
    ),
    ("Remember that I'm allergic to penicillin.", "penicillin allergy"),
    (
        "In the garden we planted tomatoes, basil and zucchini in the raised beds.",
        "what did we plant in the raised beds",
    ),
    ("My favourite novel is The Master and Margarita by Bulgakov.", "my favourite novel"),
    (
        "The car's next service is at 60,000 km, at the Toyota garage on Via Roma.",
        "toyota service garage",
    ),
    (
        "We settled on the name Aurora for the new open-source project.",
        "name of the open-source project",
    ),
    (
        "The quarterly board meeting moved to Thursday at 15:00 in room Galileo.",
        "board meeting room",
    ),
    ("The hint for my bike lock combination: the year we moved to Turin.", "bike lock"),
    (
        "Grandma's lasagna recipe uses bechamel, not ricotta, and a pinch of nutmeg.",
        "grandma's lasagna recipe",
    ),
    (
        "The flight to Tokyo is JL44, departing Heathrow at 19:05 on the 21st.",
        "tokyo flight number",
    ),
    (
        "I prefer answers in bullet points, short, with no long introductions.",
        "how do I prefer answers",
    ),
)

#: Each needle asked for in other words, sharing no content word with it (same order).
PARAPHRASES: tuple[str, ...] = (
    "where are we staying in Portugal",
    "which animal products do I avoid eating",
    "when was my sibling born",
    "when do we upgrade postgres",
    "the name of my puppy",
    "what colour will the cupboards be",
    "internet name at the chalet",
    "my race goal in Germany",
    "my clock region in Italy",
    "payment deadline for the customer bill",
    "which antibiotic makes me sick",
    "vegetables growing in the yard",
    "which book do I love best",
    "where does the vehicle get its maintenance",
    "what did we call the software",
    "where do the directors gather each quarter",
    "code for my bicycle padlock",
    "my grandmother's baked pasta",
    "which plane do I take to Japan",
    "how should replies be formatted",
)

_TOPICS = (
    "the trip to Madrid",
    "the hotel booking in Paris",
    "the team meeting",
    "the pasta recipe",
    "the cat's food",
    "the car insurance",
    "the book club",
    "the marathon training plan",
    "the project roadmap",
    "the invoice template",
    "the flight delay",
    "the garden fence",
    "the time sheet",
    "the wifi router at the office",
    "the birthday party for Marco",
    "the kitchen lights",
    "the database backup",
    "the dog walker",
    "the meeting notes",
    "the bike repair",
)
_USER = (
    "Can you summarise {t} from yesterday?",
    "Remind me what we said about {t}.",
    "I'm not sure about {t}, what do you think?",
    "Please draft an email about {t}.",
    "Is there anything left to do for {t}?",
)
_ASSISTANT = (
    "Here is a short summary of {t}: nothing is decided yet.",
    "About {t}: we only talked about options, no choice was made.",
    "I drafted a note on {t}; tell me what to change.",
    "For {t}, the next step is to check the dates.",
    "Nothing is pending for {t} as far as I can see.",
)


def filler(count: int = 200) -> list[tuple[str, str]]:
    """``count`` (role, text) messages, alternating user and assistant."""
    out: list[tuple[str, str]] = []
    pairs = zip(cycle(_USER), cycle(_ASSISTANT), strict=False)
    topics = cycle(_TOPICS)
    for user, assistant in islice(pairs, count // 2):
        topic = next(topics)
        out += [("user", user.format(t=topic)), ("assistant", assistant.format(t=topic))]
    return out
