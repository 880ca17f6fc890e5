"""Counter-based randomness: the uniform number behind a request's token at output position i is a
pure function of (seed, choice index, i). No generator state is shared or carried, so a seeded
request draws the same numbers whatever else is in the batch, after preemption or a cache hit.
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (Steele, Lea & Flood 2014)
MANTISSA_BITS = 53  # a float64 holds 53 random bits exactly


def _splitmix64(x: int) -> int:
    x = (x + GOLDEN_GAMMA) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed: int, choice_index: int, position: int) -> float:
    """A uniform number in [0, 1) determined by the triple alone."""
    x = _splitmix64(seed & MASK64)
    x = _splitmix64(x ^ (choice_index & MASK64))
    x = _splitmix64(x ^ (position & MASK64))
    return (x >> (64 - MANTISSA_BITS)) * (2.0 ** -MANTISSA_BITS)
