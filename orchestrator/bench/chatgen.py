"""The built-in ``generated-chat`` dataset: multi-turn conversations the project writes itself.

Conversations are assembled from small hand-written building blocks (topics, question forms, answer
sentences) with a seeded generator, so the set is the same for the same seed, varies in topic, length
and number of turns, and contains no text taken from anywhere else. What matters for a speculative
benchmark is that it reads like chat: repeated function words, a chat template around every turn and
answers whose length follows the question, which is what a draft trained on chat text predicts well.
"""

from __future__ import annotations

import random

from orchestrator.bench.textdata import Conversation, Message, Role

_TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sourdough bread", ("starter", "flour", "oven", "crust", "proofing", "hydration")),
    ("a small vegetable garden", ("tomatoes", "compost", "watering", "seedlings", "sunlight", "soil")),
    ("learning the guitar", ("chords", "strings", "rhythm", "practice", "fingers", "scales")),
    ("a weekend hiking trip", ("trail", "boots", "water", "map", "weather", "backpack")),
    ("saving money each month", ("budget", "expenses", "savings", "rent", "groceries", "goals")),
    ("writing a cover letter", ("employer", "skills", "experience", "tone", "paragraph", "role")),
    ("a Python function that sorts records", ("list", "key", "function", "records", "tests", "order")),
    ("training for a first 10k run", ("pace", "intervals", "rest", "shoes", "distance", "week")),
    ("keeping houseplants alive", ("light", "pots", "drainage", "leaves", "humidity", "roots")),
    ("planning a birthday party", ("guests", "cake", "music", "invitations", "games", "venue")),
    ("understanding compound interest", ("rate", "principal", "years", "growth", "deposit", "formula")),
    ("cleaning a cast iron pan", ("oil", "salt", "rust", "seasoning", "heat", "soap")),
    ("a SQL query for monthly sales", ("table", "join", "group", "date", "index", "totals")),
    ("studying for an exam", ("notes", "schedule", "breaks", "questions", "memory", "topics")),
    ("setting up a home network", ("router", "password", "signal", "devices", "channel", "cable")),
    ("cooking rice on the stove", ("water", "lid", "heat", "grains", "minutes", "pot")),
)

_OPENERS = (
    "Can you help me with {topic}?",
    "I am new to {topic}. Where should I start?",
    "What is the best way to approach {topic}?",
    "I have a question about {topic}.",
    "Could you explain {topic} in simple terms?",
    "My friend told me about {topic}, and I would like to try it.",
)

_FOLLOW_UPS = (
    "What should I do about the {word}?",
    "How much does the {word} matter here?",
    "Is there a common mistake with the {word}?",
    "Can you say more about the {word} and the {other}?",
    "What if the {word} is not right the first time?",
    "How do I know when the {word} is good enough?",
    "Could you give me a short example with the {word}?",
)

_ANSWER_SENTENCES = (
    "The most important thing is the {word}, so start there and keep it simple.",
    "Many people find that the {word} gets easier after a few tries.",
    "A good rule is to check the {word} first and then look at the {other}.",
    "If the {word} is wrong, the {other} will usually tell you, so watch it closely.",
    "You do not need special tools for the {word}; a little patience is enough.",
    "Try to change one thing at a time, for example the {word}, and see what happens.",
    "It helps to write down what you did with the {word} so you can repeat it.",
    "The {other} depends on the {word} more than most people expect.",
    "Start with a small amount and adjust the {word} as you learn.",
    "When in doubt, keep the {word} steady and give the {other} more time.",
)

_CLOSERS = (
    "Does that help?",
    "Let me know if you want more detail on any step.",
    "I can make a short checklist if that would be useful.",
    "Tell me how it goes and we can adjust the plan.",
)


def generated_chat(count: int, seed: int) -> list[Conversation]:
    """``count`` conversations, each ending with the user's turn and carrying the expected answer."""
    rng = random.Random(seed * 7919 + 17)
    return [_conversation(rng) for _ in range(count)]


def _conversation(rng: random.Random) -> Conversation:
    topic, words = rng.choice(_TOPICS)
    turns = rng.choice((1, 2, 2, 3, 3, 4))  # questions asked, the last one unanswered
    messages: list[Message] = []
    if rng.random() < 0.7:
        messages.append(Message(Role.SYSTEM, "You are a helpful assistant. Answer clearly and briefly."))
    messages.append(Message(Role.USER, rng.choice(_OPENERS).format(topic=topic)))
    answer = _answer(rng, words)
    for _ in range(turns - 1):
        messages.append(Message(Role.ASSISTANT, answer))
        word, other = rng.sample(words, 2)
        messages.append(Message(Role.USER, rng.choice(_FOLLOW_UPS).format(word=word, other=other)))
        answer = _answer(rng, words)
    return Conversation(messages=tuple(messages), answer=answer)


def _answer(rng: random.Random, words: tuple[str, ...]) -> str:
    sentences = []
    for _ in range(rng.randint(2, 9)):  # short and long answers both occur in chat traffic
        word, other = rng.sample(words, 2)
        sentences.append(rng.choice(_ANSWER_SENTENCES).format(word=word, other=other))
    if rng.random() < 0.5:
        sentences.append(rng.choice(_CLOSERS))
    return " ".join(sentences)
