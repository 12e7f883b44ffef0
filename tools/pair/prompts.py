"""Chat prompts for training a draft, and the held-out set it is measured on.

Training prompts are made here from instruction templates and topics, deterministically from a seed: a
draft is trained on the target's own answers to them (self-distillation), so what matters is that they
draw the target into the kinds of answers chat traffic asks for (explanations, lists, code, letters,
comparisons, stories), not who wrote the question. The measuring set is MT-Bench's 80 first turns
(FastChat, Apache-2.0; `trials/datasets/mt_bench_questions.jsonl`), written by other people for another
purpose: nothing about the draft was tuned on them, and `overlap` proves the two sets share no prompt.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

MT_BENCH = Path(__file__).resolve().parents[2] / "trials" / "datasets" / "mt_bench_questions.jsonl"

TEMPLATES = (
    "Explain {t} to a high school student.",
    "What is {t}? Give a short answer.",
    "Write three bullet points about {t}.",
    "Give me five tips related to {t}.",
    "Write a short poem about {t}.",
    "Summarize the history of {t} in a paragraph.",
    "What are the pros and cons of {t}?",
    "Write a short story that involves {t}.",
    "How would you teach a child about {t}?",
    "List common misconceptions about {t}.",
    "Write a friendly email to a colleague about {t}.",
    "Describe {t} in simple words.",
    "Why is {t} important?",
    "Compare {t} with something similar and explain the difference.",
    "Write a tweet about {t}.",
    "Give a step-by-step guide to getting started with {t}.",
    "What questions should a beginner ask about {t}?",
    "Write a haiku about {t}.",
    "Describe a typical day for someone who works with {t}.",
    "What are three fun facts about {t}?",
    "Write a product description for a book about {t}.",
    "Explain {t} using an analogy.",
    "What would happen if {t} disappeared tomorrow?",
    "Write a dialogue between two friends discussing {t}.",
    "Give a one-sentence definition of {t}.",
    "What skills are useful for {t}?",
    "Write a short speech about {t}.",
    "Outline a lesson plan about {t}.",
    "What are the main challenges of {t}?",
    "Write a limerick about {t}.",
)

CODE_TEMPLATES = (
    "Write a Python function that {t}.",
    "Show a short Python example that {t}, with comments.",
    "Explain how to write code that {t}.",
    "Write a JavaScript function that {t}.",
)

TOPICS = (
    "photosynthesis",
    "the water cycle",
    "volcanoes",
    "black holes",
    "the solar system",
    "gravity",
    "electricity",
    "magnets",
    "climate change",
    "recycling",
    "the human heart",
    "sleep",
    "nutrition",
    "exercise",
    "meditation",
    "the stock market",
    "inflation",
    "saving money",
    "budgeting",
    "taxes",
    "the Roman Empire",
    "ancient Egypt",
    "the printing press",
    "the industrial revolution",
    "the internet",
    "smartphones",
    "artificial intelligence",
    "robots",
    "space travel",
    "the moon landing",
    "dinosaurs",
    "bees",
    "dolphins",
    "elephants",
    "rainforests",
    "deserts",
    "oceans",
    "mountains",
    "earthquakes",
    "hurricanes",
    "renewable energy",
    "solar panels",
    "wind turbines",
    "electric cars",
    "bicycles",
    "trains",
    "airplanes",
    "cooking pasta",
    "baking bread",
    "coffee",
    "tea",
    "chocolate",
    "gardening",
    "houseplants",
    "dogs",
    "cats",
    "birdwatching",
    "fishing",
    "camping",
    "hiking",
    "swimming",
    "chess",
    "soccer",
    "basketball",
    "the Olympics",
    "music theory",
    "learning the guitar",
    "painting",
    "photography",
    "poetry",
    "reading habits",
    "libraries",
    "public speaking",
    "job interviews",
    "writing a resume",
    "time management",
    "teamwork",
    "leadership",
    "friendship",
    "kindness",
    "learning a new language",
    "studying for exams",
    "online learning",
    "video games",
    "board games",
    "social media",
    "privacy online",
    "passwords",
    "computer viruses",
    "databases",
    "cloud computing",
    "open source software",
    "the periodic table",
    "atoms",
    "DNA",
    "vaccines",
    "the immune system",
    "bacteria",
    "microscopes",
    "telescopes",
    "weather forecasting",
    "maps",
    "the compass",
    "bridges",
    "skyscrapers",
    "city planning",
    "public transport",
    "farming",
    "honey",
    "rice",
    "the seasons",
    "rainbows",
    "snow",
    "the night sky",
    "clocks",
    "calendars",
    "holidays",
    "birthdays",
    "museums",
    "theater",
    "movies",
    "comic books",
    "fairy tales",
    "mythology",
    "democracy",
    "voting",
    "human rights",
    "volunteering",
    "first aid",
    "hand washing",
    "drinking water",
    "plastic pollution",
    "coral reefs",
    "penguins",
    "owls",
    "butterflies",
    "trees",
    "rivers",
    "lakes",
    "islands",
    "glaciers",
)

CODE_TOPICS = (
    "reverses a string",
    "checks whether a number is prime",
    "sorts a list of numbers",
    "counts the words in a sentence",
    "finds the largest number in a list",
    "converts Celsius to Fahrenheit",
    "computes the factorial of a number",
    "checks whether a word is a palindrome",
    "merges two sorted lists",
    "removes duplicates from a list",
    "reads a file line by line",
    "computes the average of a list",
    "generates the Fibonacci sequence",
    "counts vowels in a string",
    "finds the second smallest number in a list",
    "capitalizes every word in a sentence",
)


def template_prompts() -> list[str]:
    """Every template-topic pair, in a fixed order."""
    pool = [t.format(t=topic) for t in TEMPLATES for topic in TOPICS]
    return pool + [t.format(t=topic) for t in CODE_TEMPLATES for topic in CODE_TOPICS]


def training_prompts(count: int, seed: int) -> list[str]:
    """``count`` distinct prompts (at most every template-topic pair), the same for the same seed."""
    pool = template_prompts()
    if count > len(pool):
        raise ValueError(f"count: at most {len(pool)} distinct training prompts, asked for {count}")
    random.Random(seed).shuffle(pool)
    return pool[:count]


def load_mt_bench(path: Path) -> list[str]:
    """MT-Bench's first turns, in question order."""
    prompts = []
    for line in path.read_text().splitlines():
        if line.strip():
            prompts.append(str(json.loads(line)["turns"][0]))
    return prompts


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z]+", text.lower()))


def overlap(train: list[str], held_out: list[str], threshold: float = 0.6) -> list[tuple[str, str]]:
    """Pairs of a training and a held-out prompt whose word sets overlap by ``threshold`` (Jaccard) or
    more: exact copies and near-copies. Empty when the sets are disjoint."""
    held = [(h, _words(h)) for h in held_out]
    pairs = []
    for t in train:
        tw = _words(t)
        for h, hw in held:
            union = tw | hw
            if union and len(tw & hw) / len(union) >= threshold:
                pairs.append((t, h))
    return pairs
