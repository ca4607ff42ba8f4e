"""The model-based strategy: Bayesian optimization with a small Gaussian process, in numpy.

The model is fitted to log(time) over the space's unit-cube coordinates (`Space.coordinates`), with a Matern 5/2
kernel whose one length scale is chosen by marginal likelihood; batches are filled by expected improvement with
the kriging believer. Registered as "surrogate" (importing `egg.search.strategy` imports this module).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from egg.search.space import Config, SpaceError
from egg.search.strategy import History, Strategy, start_point


class Surrogate(Strategy):
    """Bayesian optimization: a Gaussian process models log(time) over the space's coordinates; each batch takes the
    configurations of highest expected improvement (the kriging believer fills a batch). Failed configurations
    count as twice the slowest time seen, so the model learns to avoid their region. When no configuration is
    expected to gain `min_improvement`, or `patience` measurements in a row gained nothing, the best one's
    neighbours are measured and a few far configurations tried before the search stops: the result is at least a
    local optimum whatever the model believed."""

    name = "surrogate"

    def __init__(
        self, *, seed: int = 0, batch_size: int = 4, initial: int | None = None, min_improvement: float = 0.002,
        max_explorations: int = 3, patience: int = 16, pool_size: int = 4096,
    ) -> None:
        super().__init__(seed=seed, batch_size=batch_size)
        self.initial, self.min_improvement, self.pool_size = initial, min_improvement, pool_size
        self.patience = patience  # measurements without a gain of min_improvement before the model is doubted
        self.explored_at = 0
        self.max_explorations, self.explorations = max_explorations, 0

    def propose(self, history: History) -> list[Config]:
        space = history.space
        initial = self.initial or min(10, max(4, 2 * len(space.params)))
        observed = [t for t in history.trials if math.isfinite(t.score)]
        if len(history.trials) < initial or len(observed) < 2:
            return _space_filling(history, self.rng, max(1, initial - len(history.trials)) if len(history.trials) < initial else self.batch_size)
        pool = space.sample(self.rng, self.pool_size, exclude=history.seen)
        if not pool:
            return []
        quiet = min(_since_improvement(history, self.min_improvement), len(history.trials) - self.explored_at)
        if quiet < self.patience:
            x_seen, y_seen = _training_data(history)
            x_pool = np.array([space.coordinates(c) for c in pool])
            picks = _believer_batch(x_seen, y_seen, x_pool, self.batch_size, self.min_improvement)
            if picks:
                return [pool[i] for i in picks]
        # The model expects no gain (or its picks stopped paying): check the best locally (every neighbour measured),
        # then look far away a few times, before stopping.
        local = [c for c in space.neighbours(history.best.config) if not history.seen(c)]
        if local or self.explorations >= self.max_explorations:
            return local
        self.explorations += 1
        self.explored_at = len(history.trials) + self.batch_size  # the model gets `patience` more tries after this
        return _space_filling(history, self.rng, self.batch_size, include_default=False)


def _since_improvement(history: History, min_improvement: float) -> int:
    """Measurements since the best score last improved by more than `min_improvement` (relative)."""
    best, last = math.inf, 0
    for index, trial in enumerate(history.trials):
        if trial.score < best * (1 - min_improvement):
            last = index
        best = min(best, trial.score)
    return len(history.trials) - 1 - last


def _space_filling(history: History, rng: random.Random, count: int, include_default: bool = True) -> list[Config]:
    """`count` unmeasured configurations spread over the space (the default first, then maximin from a pool)."""
    chosen: list[Config] = []
    start = start_point(history, rng) if include_default else None
    if start is not None:
        chosen.append(start)
    pool = history.space.sample(rng, 256, exclude=lambda c: history.seen(c) or c in chosen)
    seen = [history.space.coordinates(t.config) for t in history.trials] + [history.space.coordinates(c) for c in chosen]
    while len(chosen) < count and pool:
        points = np.array([history.space.coordinates(c) for c in pool])
        if seen:
            nearest = np.sqrt(((points[:, None, :] - np.array(seen)[None, :, :]) ** 2).sum(-1)).min(axis=1)
            index = int(nearest.argmax())
        else:
            index = 0
        chosen.append(pool.pop(index))
        seen.append(list(points[index]))
    return chosen[:count]


def _training_data(history: History) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates and log-scores of every outcome; failures get log(2 x the slowest finite score)."""
    finite = [t.score for t in history.trials if math.isfinite(t.score)]
    penalty = math.log(2 * max(finite))
    x = np.array([history.space.coordinates(t.config) for t in history.trials])
    y = np.array([math.log(t.score) if math.isfinite(t.score) else penalty for t in history.trials])
    return x, y


@dataclass(frozen=True)
class _Gaussian:
    """A fitted Gaussian process (Matern 5/2, one length scale, targets standardized)."""

    x: np.ndarray
    chol: np.ndarray
    alpha: np.ndarray
    length: float
    mean: float
    scale: float

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = _matern(points, self.x, self.length)
        mu = k @ self.alpha
        v = np.linalg.solve(self.chol, k.T)
        var = np.maximum(1.0 - (v * v).sum(axis=0), 1e-12)
        return mu * self.scale + self.mean, np.sqrt(var) * self.scale


def _matern(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    d = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0)) * math.sqrt(5) / length
    return (1 + d + d * d / 3) * np.exp(-d)


def _fit(x: np.ndarray, y: np.ndarray, noise: float = 1e-3) -> _Gaussian:
    """Fit with the length scale of highest marginal likelihood from a small grid."""
    mean, scale = float(y.mean()), float(y.std()) or 1.0
    z = (y - mean) / scale
    best: tuple[float, _Gaussian] | None = None
    for length in (0.1, 0.2, 0.35, 0.5, 0.8, 1.2, 2.0):
        cov = _matern(x, x, length) + noise * np.eye(len(x))
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            continue
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
        evidence = -0.5 * float(z @ alpha) - float(np.log(np.diag(chol)).sum())
        if best is None or evidence > best[0]:
            best = (evidence, _Gaussian(x, chol, alpha, length, mean, scale))
    if best is None:
        raise SpaceError("the surrogate model could not be fitted")
    return best[1]


def _expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    z = (best - mu) / sigma
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (best - mu) * cdf + sigma * pdf


def _believer_batch(x: np.ndarray, y: np.ndarray, pool: np.ndarray, count: int, min_improvement: float) -> list[int]:
    """Indexes into `pool` of up to `count` points by expected improvement; each pick joins the data at its
    predicted value before the next. Empty when the first pick is expected to gain less than `min_improvement`."""
    picks: list[int] = []
    for _ in range(min(count, len(pool))):
        model = _fit(x, y)
        mu, sigma = model.predict(pool)
        ei = _expected_improvement(mu, sigma, float(y.min()))
        ei[picks] = -1.0
        index = int(ei.argmax())
        if not picks and ei[index] < min_improvement:  # log-time units: a relative gain
            return []
        picks.append(index)
        x, y = np.vstack([x, pool[index]]), np.append(y, mu[index])
    return picks
