"""An operator bandit: splits proposals across mutators by their measured success.

Discounted Thompson sampling on Bernoulli rewards (1 = the child beat its parent, or the
elite). Old evidence decays, so an operator that stops paying off loses its share.

>>> import numpy as np
>>> b = OperatorBandit(["point", "restart"])
>>> for _ in range(50): b.credit("point", 1.0); b.credit("restart", 0.0)
>>> rng = np.random.default_rng(0)
>>> sum(b.choose(rng) == "point" for _ in range(100)) > 80
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["OperatorBandit"]


class OperatorBandit:
    def __init__(self, names: Sequence[str], *, decay: float = 0.97, prior: float = 1.0) -> None:
        if not names:
            raise ValueError("a bandit needs at least one operator")
        self.names = list(names)
        self.decay = decay
        self.prior = prior
        self.wins = {n: 0.0 for n in names}
        self.losses = {n: 0.0 for n in names}
        self.pulls = {n: 0 for n in names}
        self.successes = {n: 0 for n in names}

    def add(self, name: str) -> None:
        """A new operator, with the prior's neutral belief."""
        if name not in self.names:
            self.names.append(name)
            self.wins[name] = self.losses[name] = 0.0
            self.pulls[name] = self.successes[name] = 0

    def choose(self, rng: np.random.Generator, allowed: Iterable[str] | None = None) -> str:
        names = [n for n in self.names if allowed is None or n in set(allowed)]
        if not names:
            raise ValueError("no operator is allowed")
        draws = [rng.beta(self.prior + self.wins[n], self.prior + self.losses[n]) for n in names]
        return names[int(np.argmax(draws))]

    def credit(self, name: str, reward: float) -> None:
        reward = min(max(float(reward), 0.0), 1.0)
        for n in self.names:
            self.wins[n] *= self.decay
            self.losses[n] *= self.decay
        self.wins[name] += reward
        self.losses[name] += 1.0 - reward
        self.pulls[name] += 1
        self.successes[name] += reward > 0

    def stats(self) -> dict[str, dict[str, float]]:
        return {
            n: {
                "pulls": self.pulls[n],
                "successes": self.successes[n],
                "mean": (self.prior + self.wins[n]) / (2 * self.prior + self.wins[n] + self.losses[n]),
            }
            for n in self.names
        }
