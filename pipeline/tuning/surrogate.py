"""The model-based strategy: pattern search assisted by a small Gaussian process, in numpy.

The model is fitted to log(time) over the space's unit-cube coordinates (`Space.coordinates`), with a Matern 5/2
kernel whose length scales (one per coordinate) and noise are chosen by marginal likelihood. Registered as
"surrogate" (importing `pipeline.tuning.strategy` imports this module).

Why a hybrid: on the H200's measured landscapes (`pipeline.tuning.replay`, docs/search.md) good GEMM tiles sit on narrow
ridges between many local optima; a model fitted to a quarter of the space ranks them only roughly, while a local
descent from the kernel's own config finds them when it is not misled by noise. So the descent measures the
neighbourhoods and the model adds, to each batch, the configuration it expects to gain most from anywhere in the
space; a model pick that turns out best becomes the descent's next centre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.tuning.space import Config, SpaceError
from pipeline.tuning.strategy import History, PatternSearch, Strategy


class Surrogate(Strategy):
    """Model-assisted pattern search. Each batch is the pattern descent's next moves (`PatternSearch`: best-first
    coordinate moves from the kernel's current config, restarts when stalled) plus `model_picks` configurations of
    highest expected improvement under a Gaussian process of log(time) (the kriging believer fills more than one).
    Failed configurations count as the slowest time seen. The search stops when the descent is over and no
    configuration is expected to gain `min_improvement`."""

    name = "surrogate"

    def __init__(self, *, seed: int = 0, batch_size: int = 4, model_picks: int = 1, min_improvement: float = 0.002,
                 pool_size: int = 4096) -> None:
        super().__init__(seed=seed, batch_size=batch_size)
        self.descent = PatternSearch(seed=seed, min_improvement=min_improvement)
        self.model_picks, self.min_improvement, self.pool_size = model_picks, min_improvement, pool_size

    def propose(self, history: History) -> list[Config]:
        moves = self.descent.propose(history)
        picks = self._model_picks(history, exclude={c.key for c in moves})
        self.descent.adopt(picks)
        return moves + picks

    def _model_picks(self, history: History, exclude: set[str]) -> list[Config]:
        if self.model_picks < 1 or sum(math.isfinite(t.score) for t in history.trials) < 2:
            return []
        space = history.space
        pool = space.sample(self.rng, self.pool_size, exclude=lambda c: history.seen(c) or c.key in exclude)
        if not pool:
            return []
        x_seen, y_seen = _training_data(history)
        picks = _believer_batch(x_seen, y_seen, np.array([space.coordinates(c) for c in pool]), self.model_picks, self.min_improvement)
        return [pool[i] for i in picks]


def _training_data(history: History) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates and log-scores of every outcome; failures get log(the slowest finite score)
    (not twice the slowest: a cliff at pruned tiles made the model fit the H200 tables worse)."""
    finite = [t.score for t in history.trials if math.isfinite(t.score)]
    penalty = math.log(max(finite))
    x = np.array([history.space.coordinates(t.config) for t in history.trials])
    y = np.array([math.log(t.score) if math.isfinite(t.score) else penalty for t in history.trials])
    return x, y


@dataclass(frozen=True)
class _Gaussian:
    """A fitted Gaussian process (Matern 5/2, one length scale per coordinate, targets standardized)."""

    x: np.ndarray
    chol: np.ndarray
    alpha: np.ndarray
    lengths: np.ndarray
    mean: float
    scale: float
    noise: float

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = _matern(points, self.x, self.lengths)
        mu = k @ self.alpha
        v = np.linalg.solve(self.chol, k.T)
        var = np.maximum(1.0 - (v * v).sum(axis=0), 1e-12)
        return mu * self.scale + self.mean, np.sqrt(var) * self.scale


def _matern(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    diff = (a[:, None, :] - b[None, :, :]) / lengths
    d = np.sqrt(np.maximum((diff * diff).sum(-1), 0.0)) * math.sqrt(5)
    return (1 + d + d * d / 3) * np.exp(-d)


_LENGTHS = (0.1, 0.2, 0.35, 0.5, 0.8, 1.2, 2.0, 5.0)
_NOISES = (1e-4, 1e-3, 1e-2, 5e-2)


def _evidence(x: np.ndarray, z: np.ndarray, lengths: np.ndarray, noise: float) -> tuple[float, np.ndarray, np.ndarray] | None:
    """Log marginal likelihood (up to a constant), the Cholesky factor and alpha; None when not positive definite."""
    try:
        chol = np.linalg.cholesky(_matern(x, x, lengths) + noise * np.eye(len(x)))
    except np.linalg.LinAlgError:
        return None
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
    return -0.5 * float(z @ alpha) - float(np.log(np.diag(chol)).sum()), chol, alpha


def _fit(x: np.ndarray, y: np.ndarray, sweeps: int = 2) -> _Gaussian:
    """Fit length scales (one per coordinate: automatic relevance) and noise by marginal likelihood: the best
    shared length scale from a grid, then coordinate ascent over each coordinate's scale and the noise."""
    mean, scale = float(y.mean()), float(y.std()) or 1.0
    z = (y - mean) / scale
    dims = x.shape[1]
    best: tuple[float, np.ndarray, float] | None = None
    for length in _LENGTHS:
        for noise in _NOISES:
            found = _evidence(x, z, np.full(dims, length), noise)
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], np.full(dims, length), noise)
    if best is None:
        raise SpaceError("the surrogate model could not be fitted")
    for _ in range(sweeps):
        for dim in range(dims + 1):
            for value in (_NOISES if dim == dims else _LENGTHS):
                lengths, noise = best[1].copy(), best[2]
                if dim == dims:
                    noise = value
                else:
                    lengths[dim] = value
                found = _evidence(x, z, lengths, noise)
                if found is not None and found[0] > best[0]:
                    best = (found[0], lengths, noise)
    return _condition(x, y, best[1], best[2])


def _condition(x: np.ndarray, y: np.ndarray, lengths: np.ndarray, noise: float) -> _Gaussian:
    """The process with fixed length scales and noise, conditioned on (x, y)."""
    mean, scale = float(y.mean()), float(y.std()) or 1.0
    _, chol, alpha = _evidence(x, (y - mean) / scale, lengths, noise)
    return _Gaussian(x, chol, alpha, lengths, mean, scale, noise)


def _expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    z = (best - mu) / sigma
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (best - mu) * cdf + sigma * pdf


def _centre(history, breadth):
    finite = sorted((t for t in history.trials if math.isfinite(t.score)), key=lambda t: t.score)
    for t in finite:
        if t.score > finite[0].score * (1 + breadth):
            return None
        if any(not history.seen(c) for c in history.space.neighbours(t.config)):
            return t.config
    return None


def _believer_batch(x: np.ndarray, y: np.ndarray, pool: np.ndarray, count: int, min_improvement: float) -> list[int]:
    """Indexes into `pool` of up to `count` points by expected improvement; each pick joins the data at its
    predicted value before the next (hyperparameters are fitted once per batch). Empty when no point is expected to
    gain `min_improvement`."""
    picks: list[int] = []
    fitted = _fit(x, y)
    for _ in range(min(count, len(pool))):
        model = _condition(x, y, fitted.lengths, fitted.noise)
        mu, sigma = model.predict(pool)
        ei = _expected_improvement(mu, sigma, float(y.min()))
        ei[picks] = -1.0
        index = int(ei.argmax())
        if ei[index] < min_improvement:  # log-time units: a relative gain
            break
        picks.append(index)
        x, y = np.vstack([x, pool[index]]), np.append(y, mu[index])
    return picks
