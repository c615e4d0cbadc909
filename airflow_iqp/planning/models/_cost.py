"""Cost models: Cost(q, n) and EstimateTuplesProcessed(q, d) of the paper, and the fit of a
piecewise linear model to measured batches."""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models._checks import UNBOUNDED, check_points, finite_nonneg, steeper_mean_slope, within


class CostModel(Protocol):
    """Cost(q, n) and EstimateTuplesProcessed(q, d) of the paper."""

    def cost(self, n: int) -> float:
        """Seconds to process ``n`` units in one batch; ``cost(0) == 0``."""

    def capacity(self, d: float) -> int:
        """The most units one batch can process in ``d`` seconds (0 if none)."""

    def to_dict(self) -> dict: ...


def _capacity_by_search(cost: Callable[[int], float], d: float) -> int:
    """Largest n with cost(n) <= d, for any non-decreasing cost with cost(0) == 0."""
    if d < 0 or not within(cost(1), d):
        return 0
    lo, hi = 1, 2
    while within(cost(hi), d):
        lo, hi = hi, hi * 2
        if hi > UNBOUNDED // 2:
            return UNBOUNDED
    while hi - lo > 1:  # invariant: cost(lo) fits, cost(hi) does not
        mid = (lo + hi) // 2
        if within(cost(mid), d):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class LinearCost:
    """``per_batch + per_unit * n`` seconds for a batch of ``n >= 1`` units."""

    per_unit: float
    per_batch: float = 0.0

    def __post_init__(self):
        finite_nonneg(self.per_unit, "cost.per_unit")
        finite_nonneg(self.per_batch, "cost.per_batch")
        if self.per_unit == 0 and self.per_batch == 0:
            raise ConfigError("a batch must cost something: per_unit and per_batch are both 0", "cost")

    def cost(self, n: int) -> float:
        return 0.0 if n <= 0 else self.per_batch + self.per_unit * n

    def capacity(self, d: float) -> int:
        if d < 0 or not within(self.per_batch + self.per_unit, d):
            return 0
        if self.per_unit == 0:
            return UNBOUNDED
        n = int(math.floor((d - self.per_batch) / self.per_unit))
        # The division may land one off either way; settle it on cost() itself.
        while n > 1 and not within(self.cost(n), d):
            n -= 1
        while within(self.cost(n + 1), d):
            n += 1
        return max(n, 1)

    def to_dict(self) -> dict:
        return {"kind": "linear", "per_unit": self.per_unit, "per_batch": self.per_batch}


@dataclass(frozen=True)
class PiecewiseLinearCost:
    """Seconds for a batch of ``n`` units, linear between measured ``(units, seconds)`` points.

    Below the first point the first piece is extended towards zero units (its value
    there is the per-batch overhead, clamped at 0); beyond the last point the last
    piece is extended, or the mean slope from the first point to the last where that is
    steeper (:func:`~airflow_iqp.planning.models._checks.steeper_mean_slope`, as for
    :class:`~airflow_iqp.planning.models.PiecewiseLinearFinalAgg`). ``cost(0)`` is 0: no
    batch, no cost.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self):
        pts = check_points(self.points, "cost.points", x_name="units", y_name="seconds",
                            strictly_increasing_x=True, min_points=2)
        if pts[0][0] < 0:
            raise ConfigError("units must be >= 0", "cost.points[0]")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_xs", [p[0] for p in pts])
        object.__setattr__(self, "_ys", [p[1] for p in pts])
        object.__setattr__(self, "_slopes", [(pts[i + 1][1] - pts[i][1]) / (pts[i + 1][0] - pts[i][0])
                                             for i in range(len(pts) - 1)])
        object.__setattr__(self, "_beyond", steeper_mean_slope(pts))  # None: along the last piece

    @property
    def overhead(self) -> float:
        """The per-batch overhead: the first piece extended to zero units."""
        return self._at(0.0)

    def _at(self, x: float) -> float:
        xs = self._xs
        i = bisect.bisect_right(xs, x) - 1
        if i < 0:  # below the first point: the first piece, extended (clamped at 0)
            v = self._ys[0] + self._slopes[0] * (x - xs[0])
            return v if v > 0.0 else 0.0
        if i >= len(self._slopes):  # at or beyond the last point
            if self._beyond is not None:
                return self._ys[-1] + self._beyond * (x - xs[-1])
            i = len(self._slopes) - 1
        return self._ys[i] + self._slopes[i] * (x - xs[i])

    def cost(self, n: int) -> float:
        return 0.0 if n <= 0 else self._at(float(n))

    def capacity(self, d: float) -> int:
        """Invert the piece that holds ``d`` (one bisection), then settle on ``cost`` itself."""
        if d < 0:
            return 0
        pts, ys = self.points, self._ys
        i = bisect.bisect_right(ys, d)
        if i == len(pts):  # beyond the last point (:meth:`_at`)
            if self._beyond is not None:
                x = pts[-1][0] + (d - pts[-1][1]) / self._beyond
            else:
                (x0, y0), (x1, y1) = pts[-2], pts[-1]
                if y1 == y0:
                    return UNBOUNDED
                x = x1 + (d - y1) * (x1 - x0) / (y1 - y0)
        else:  # within piece [i-1, i] (or below the first point, along the first piece)
            (x0, y0), (x1, y1) = pts[max(i - 1, 0)], pts[max(i, 1)]
            if y1 == y0:  # only below a flat first piece, which costs more than d everywhere
                return 0
            x = x0 + (d - y0) * (x1 - x0) / (y1 - y0)
        n = max(1, min(int(math.floor(x)), UNBOUNDED - 1))
        while n >= 1 and not within(self.cost(n), d):
            n -= 1
        if n == 0:
            return 0
        while within(self.cost(n + 1), d):
            n += 1
        return n

    def to_dict(self) -> dict:
        return {"kind": "piecewise_linear", "points": [list(p) for p in self.points]}


@dataclass(frozen=True)
class CallableCost:
    """Any non-decreasing ``fn(n) -> seconds``; capacity by binary search.

    Not serialisable to JSON: for models built in code (tests, simulations).
    """

    fn: Callable[[int], float]
    name: str = "callable"

    def cost(self, n: int) -> float:
        return 0.0 if n <= 0 else float(self.fn(n))

    def capacity(self, d: float) -> int:
        return _capacity_by_search(self.cost, d)

    def to_dict(self) -> dict:
        raise ConfigError(f"cost model {self.name!r} is a Python callable and has no JSON form", "cost")


def fit_piecewise_linear(samples: Sequence[tuple[float, float]], max_pieces: int | None = None) -> PiecewiseLinearCost:
    """Fit a non-decreasing piecewise linear cost model to measured ``(units, seconds)``.

    Repeated measurements of one batch size are reduced to their median, so one slow run
    among three moves nothing; the medians are made non-decreasing by pooling adjacent
    violators (isotonic regression), so noise in the measurements never yields a cost
    model that says more units are cheaper.
    With ``max_pieces`` the breakpoints are thinned to the ones that keep the
    squared error of the interpolation smallest (dynamic programming over the
    measured sizes), always keeping the first and the last.
    """
    by_x = _medians(samples)
    if len(by_x) < 2:
        raise ConfigError("need measurements at two or more distinct batch sizes", "samples")
    xs = sorted(by_x)
    blocks = [[by_x[x][0], by_x[x][1], 1] for x in xs]  # median, weight (samples), count (sizes)
    pooled: list[list[float]] = []
    for b in blocks:
        pooled.append(b)
        while len(pooled) > 1 and pooled[-2][0] > pooled[-1][0]:
            (m1, w1, c1), (m2, w2, c2) = pooled[-2], pooled[-1]
            pooled[-2:] = [[(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2]]
    ys = [m for m, _w, c in pooled for _ in range(int(c))]
    pts = list(zip(xs, ys))
    if max_pieces is not None:
        if max_pieces < 1:
            raise ConfigError("must be >= 1", "max_pieces")
        pts = _thin_breakpoints(pts, max_pieces + 1)
    return PiecewiseLinearCost(tuple(pts))


def _medians(samples: Sequence[tuple[float, float]]) -> dict[float, tuple[float, int]]:
    """``{units: (median seconds, number of samples)}`` of measured ``(units, seconds)``."""
    by_x: dict[float, list[float]] = {}
    for i, s in enumerate(samples):
        if len(s) != 2:
            raise ConfigError("each sample is a pair (units, seconds)", f"samples[{i}]")
        x, y = float(s[0]), float(s[1])
        if not (math.isfinite(x) and math.isfinite(y)) or x < 0 or y < 0:
            raise ConfigError("units and seconds must be finite and >= 0", f"samples[{i}]")
        by_x.setdefault(x, []).append(y)
    return {x: (statistics.median(ys), len(ys)) for x, ys in by_x.items()}


def decreasing_sizes(samples: Sequence[tuple[float, float]], tolerance: float = 0.05) -> set[float]:
    """The sizes of measured ``(units, seconds)`` whose median exceeds a larger size's median by
    more than ``tolerance`` of it, with those larger sizes: the measurements that say more
    units cost less. A batch of more units does the same work and more, so only noise (a slow
    run on a shared machine) makes them so; measuring those sizes again lets the median drop
    the slow run, where the fit's pooling would flatten the model over both sizes."""
    med = sorted((x, m) for x, (m, _n) in _medians(samples).items())
    out: set[float] = set()
    for i, (xi, mi) in enumerate(med):
        for xj, mj in med[i + 1:]:
            if mi > mj * (1 + tolerance):
                out.update((xi, xj))
    return out


def _thin_breakpoints(pts: list[tuple[float, float]], keep: int) -> list[tuple[float, float]]:
    """Keep ``keep`` of ``pts`` (first and last included) minimising interpolation error."""
    n = len(pts)
    if n <= keep:
        return pts

    def seg_err(i: int, j: int) -> float:
        (x0, y0), (x1, y1) = pts[i], pts[j]
        return sum((y0 + (y1 - y0) * (pts[k][0] - x0) / (x1 - x0) - pts[k][1]) ** 2 for k in range(i + 1, j))

    inf = float("inf")
    best = [[inf] * n for _ in range(keep)]  # best[m][j]: m+1 points kept ending at j
    prev = [[-1] * n for _ in range(keep)]
    best[0][0] = 0.0
    for m in range(1, keep):
        for j in range(1, n):
            for i in range(j):
                if best[m - 1][i] < inf:
                    e = best[m - 1][i] + seg_err(i, j)
                    if e < best[m][j]:
                        best[m][j], prev[m][j] = e, i
    idx, m = [n - 1], keep - 1
    while m > 0:
        idx.append(prev[m][idx[-1]])
        m -= 1
    return [pts[i] for i in reversed(idx)]
