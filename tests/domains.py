"""Seeded input domains for gradient tests: values where every primitive is smooth, so no
finite difference straddles a kink (the seed chapter's positive_input and away_from_zero)."""

import numpy as np


class Domains:
    def __init__(self, seed: int, margin: float):
        self.rng = np.random.default_rng(seed)
        self.margin = margin

    def normal(self, *shape):
        return self.rng.standard_normal(shape)

    def positive(self, *shape):
        """[0.5, 2.5): for log, sqrt, pow."""
        return self.rng.uniform(0.5, 2.5, shape)

    def away_from_zero(self, *shape):
        """At least `margin` from 0: for abs, relu, prod."""
        x = self.rng.standard_normal(shape)
        return np.where(x >= 0, x + self.margin, x - self.margin)

    def distinct(self, *shape):
        """Values at least 0.1 apart, in random order: no ties within eps (for max/min)."""
        n = int(np.prod(shape))
        return (self.rng.permutation(n) * 0.1 - n * 0.05 + 0.01).reshape(shape)
