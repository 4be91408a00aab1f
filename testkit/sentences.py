"""Generated sentences over a small vocabulary, for the tests and the benchmarks alike."""

from __future__ import annotations

import random

WORDS = (
    "the quick brown fox jumps over a lazy dog while engineers deploy embedding servers on their own "
    "machines to keep data private and costs fixed across clusters of graphics cards and processors"
).split()


def make_sentences(count: int = 50, seed: int = 7) -> list[str]:
    """Mixed lengths, from one word to well past MiniLM's 256-token limit."""
    rng = random.Random(seed)
    lengths = [1, 2, 3, 5, 8] + [rng.randint(4, 60) for _ in range(count - 10)] + [300, 350, 400, 500, 700]
    return [" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "." for n in lengths[:count]]


def short_sentences(count: int, seed: int, shortest: int, longest: int) -> list[str]:
    """`count` sentences of `shortest` to `longest` words: over so few words, near neighbours differ by little."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(shortest, longest))).capitalize() + "."
        for _ in range(count)
    ]
