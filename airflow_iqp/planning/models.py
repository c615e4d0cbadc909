"""The models the planner reasons with: cost, final aggregation, arrival.

Pure Python (layer 1): no Airflow, Spark or OR-Tools imports.

Times are seconds as floats on one axis shared by the window, the deadline and the
arrival model (the Airflow layer uses seconds since the window start). Units of input
are whole counts: a tuple, a file or an offset, as the input adapter defines it.

Every model serialises to a plain dict with a ``kind`` key (``to_dict``) and is
rebuilt from one by ``cost_model_from_dict``, ``final_agg_from_dict`` and
``arrival_from_dict``. Those parsers are the only place that validates a model's
configuration; they raise :class:`~airflow_iqp.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import bisect
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from airflow_iqp.errors import ConfigError

#: Relative tolerance for comparing seconds. Costs and arrival times are sums of
#: floats; a plan that meets its deadline "exactly" must not fail on rounding.
TIME_TOL = 1e-9

#: What ``capacity`` returns when a cost model never exceeds the duration.
UNBOUNDED = sys.maxsize


def within(t: float, limit: float) -> bool:
    """``t <= limit`` up to rounding of the float arithmetic."""
    return t <= limit + TIME_TOL * max(1.0, abs(limit))


# --------------------------------------------------------------------------- cost


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
        _finite_nonneg(self.per_unit, "cost.per_unit")
        _finite_nonneg(self.per_batch, "cost.per_batch")
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
    piece is extended. ``cost(0)`` is 0: no batch, no cost.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self):
        pts = _check_points(self.points, "cost.points", x_name="units", y_name="seconds",
                            strictly_increasing_x=True, min_points=2)
        if pts[0][0] < 0:
            raise ConfigError("units must be >= 0", "cost.points[0]")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_xs", [p[0] for p in pts])
        object.__setattr__(self, "_ys", [p[1] for p in pts])
        object.__setattr__(self, "_slopes", [(pts[i + 1][1] - pts[i][1]) / (pts[i + 1][0] - pts[i][0])
                                             for i in range(len(pts) - 1)])

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
        if i >= len(self._slopes):  # at or beyond the last point: the last piece, extended
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
        if i == len(pts):  # beyond the last point: along the last piece
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

    Repeated measurements of one batch size are averaged; the averages are made
    non-decreasing by pooling adjacent violators (isotonic regression), so noise in
    the measurements never yields a cost model that says more units are cheaper.
    With ``max_pieces`` the breakpoints are thinned to the ones that keep the
    squared error of the interpolation smallest (dynamic programming over the
    measured sizes), always keeping the first and the last.
    """
    by_x: dict[float, list[float]] = {}
    for i, s in enumerate(samples):
        if len(s) != 2:
            raise ConfigError("each sample is a pair (units, seconds)", f"samples[{i}]")
        x, y = float(s[0]), float(s[1])
        if not (math.isfinite(x) and math.isfinite(y)) or x < 0 or y < 0:
            raise ConfigError("units and seconds must be finite and >= 0", f"samples[{i}]")
        by_x.setdefault(x, []).append(y)
    if len(by_x) < 2:
        raise ConfigError("need measurements at two or more distinct batch sizes", "samples")
    xs = sorted(by_x)
    blocks = [[sum(by_x[x]) / len(by_x[x]), len(by_x[x]), 1] for x in xs]  # mean, weight, count
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


def plus_fixed(model, seconds: float):
    """The same cost model with ``seconds`` more per batch (or per merge): a fixed cost the
    measurements left out, such as the orchestrator starting the task. Linear and
    piecewise linear models of either kind."""
    _finite_nonneg(seconds, "dispatch")
    if not seconds:
        return model
    if isinstance(model, LinearCost):
        return replace(model, per_batch=model.per_batch + seconds)
    if isinstance(model, LinearFinalAgg):
        return replace(model, base=model.base + seconds)
    if isinstance(model, (PiecewiseLinearCost, PiecewiseLinearFinalAgg)):
        return replace(model, points=tuple((x, y + seconds) for x, y in model.points))
    raise ConfigError(f"cannot add a fixed cost to a {type(model).__name__}", "cost")


def scaled(model, factor: float):
    """The same cost model with every cost ``factor`` times as long: the load a deployment
    adds while a window runs (the orchestrator, other queries on the cluster) that an idle
    calibration did not see. Linear and piecewise linear models of either kind."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ConfigError(f"must be a number > 0, got {factor!r}", "cost_scale")
    if factor == 1:
        return model
    if isinstance(model, LinearCost):
        return replace(model, per_unit=model.per_unit * factor, per_batch=model.per_batch * factor)
    if isinstance(model, LinearFinalAgg):
        return replace(model, base=model.base * factor, per_batch=model.per_batch * factor)
    if isinstance(model, (PiecewiseLinearCost, PiecewiseLinearFinalAgg)):
        return replace(model, points=tuple((x, y * factor) for x, y in model.points))
    raise ConfigError(f"cannot scale a {type(model).__name__}", "cost_scale")


# ------------------------------------------------------------ final aggregation


class FinalAggCost(Protocol):
    """minCompCostAgg: seconds to merge ``k`` partial results. Zero for ``k <= 1``."""

    def cost(self, k: int) -> float: ...

    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class LinearFinalAgg:
    """``base + per_batch * k`` seconds for ``k > 1`` partials; a single batch needs no merge.

    With ``merge_single`` a single batch is merged too (``k = 1`` costs ``base + per_batch``):
    a system whose final step always runs, as this provider's does. ``shared_startup``
    seconds come off (never below zero) when the merge runs in the last batch's job (a
    fused tail) and so does not start a job of its own.
    """

    base: float = 0.0
    per_batch: float = 0.0
    merge_single: bool = False
    shared_startup: float = 0.0

    def __post_init__(self):
        _finite_nonneg(self.base, "final_agg.base")
        _finite_nonneg(self.per_batch, "final_agg.per_batch")
        _finite_nonneg(self.shared_startup, "final_agg.shared_startup")

    def cost(self, k: int) -> float:
        if k < (1 if self.merge_single else 2):
            return 0.0
        return max(0.0, self.base + self.per_batch * k - self.shared_startup)

    def to_dict(self) -> dict:
        return _agg_flags({"kind": "linear", "base": self.base, "per_batch": self.per_batch}, self)


@dataclass(frozen=True)
class PiecewiseLinearFinalAgg:
    """Seconds to merge ``k`` partials, linear between ``(batches, seconds)`` points.

    Held constant below the first point and extended along the last piece above the
    last one. Zero for ``k <= 1``, unless ``merge_single`` (the final step runs even for a
    single batch; ``k = 1`` then costs the curve's value). ``shared_startup`` as for
    :class:`LinearFinalAgg`.
    """

    points: tuple[tuple[float, float], ...]
    merge_single: bool = False
    shared_startup: float = 0.0

    def __post_init__(self):
        pts = _check_points(self.points, "final_agg.points", x_name="batches", y_name="seconds",
                            strictly_increasing_x=True, min_points=1)
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_xs", [p[0] for p in pts])
        _finite_nonneg(self.shared_startup, "final_agg.shared_startup")

    def cost(self, k: int) -> float:
        if k < (1 if self.merge_single else 2):
            return 0.0
        pts = self.points
        if len(pts) == 1 or k <= pts[0][0]:
            y = pts[0][1]
        else:
            i = min(max(bisect.bisect_right(self._xs, k), 1), len(pts) - 1)
            (x0, y0), (x1, y1) = pts[i - 1], pts[i]
            y = y0 + (y1 - y0) * (k - x0) / (x1 - x0)
        return max(0.0, y - self.shared_startup)

    def to_dict(self) -> dict:
        return _agg_flags({"kind": "piecewise_linear", "points": [list(p) for p in self.points]}, self)


def _agg_flags(d: dict, agg) -> dict:
    if agg.merge_single:
        d["merge_single"] = True
    if agg.shared_startup:
        d["shared_startup"] = agg.shared_startup
    return d



# ---------------------------------------------------------------------- arrival


class ArrivalModel(Protocol):
    """InputTime(stream, n) of the paper, and its inverse."""

    @property
    def total(self) -> int:
        """How many units the window holds."""

    def time_of(self, n: int) -> float:
        """When the ``n``-th unit (1-based) is available."""

    def count_at(self, t: float) -> int:
        """How many units are available at time ``t``."""

    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class FixedRate:
    """``rate`` units per second from ``start``: unit k arrives at ``start + (k-1)/rate``."""

    rate: float
    total: int
    start: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate)) or self.rate <= 0:
            raise ConfigError(f"must be a number > 0, got {self.rate!r}", "arrival.rate")
        _whole_nonneg(self.total, "arrival.total")
        object.__setattr__(self, "total", int(self.total))

    def time_of(self, n: int) -> float:
        _in_range(n, self.total)
        return self.start + (max(n, 1) - 1) / self.rate

    def count_at(self, t: float) -> int:
        if t < self.start:
            return 0
        return min(self.total, int(math.floor((t - self.start) * self.rate + TIME_TOL)) + 1)

    def to_dict(self) -> dict:
        return {"kind": "fixed_rate", "rate": self.rate, "total": self.total}


@dataclass(frozen=True)
class ProfileArrival:
    """Cumulative units over time, linear between ``(time, cumulative)`` points.

    ``count_at(t)`` is the whole number of units under the curve at ``t``;
    ``time_of(n)`` the first time the curve reaches ``n``. No unit arrives before
    the first point's time, and ``total`` is the last point's count.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self):
        pts = _check_points(self.points, "arrival.points", x_name="time", y_name="cumulative",
                            strictly_increasing_x=True, min_points=1)
        if pts[0][1] < 0:
            raise ConfigError("cumulative counts must be >= 0", "arrival.points[0]")
        last = pts[-1][1]
        if last != int(last):
            raise ConfigError(f"the last cumulative count is the window's unit total and must be whole, got {last}",
                              f"arrival.points[{len(pts) - 1}]")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_ts", [p[0] for p in pts])
        object.__setattr__(self, "_cs", [p[1] for p in pts])

    @property
    def total(self) -> int:
        return int(self.points[-1][1])

    def time_of(self, n: int) -> float:
        _in_range(n, self.total)
        cs, ts = self._cs, self._ts
        i = bisect.bisect_left(cs, n - TIME_TOL)
        if i == 0:
            return ts[0]
        c0, c1 = cs[i - 1], cs[i]
        return ts[i - 1] + (ts[i] - ts[i - 1]) * (n - c0) / (c1 - c0)

    def count_at(self, t: float) -> int:
        ts, cs = self._ts, self._cs
        i = bisect.bisect_right(ts, t)
        if i == 0:
            return 0
        if i == len(ts):
            c = cs[-1]
        else:
            c = cs[i - 1] + (cs[i] - cs[i - 1]) * (t - ts[i - 1]) / (ts[i] - ts[i - 1])
        return int(math.floor(c + TIME_TOL))

    def to_dict(self) -> dict:
        return {"kind": "profile", "points": [list(p) for p in self.points]}


@dataclass(frozen=True)
class EmpiricalArrival:
    """Observed arrival times, one per unit (sorted on construction)."""

    times: tuple[float, ...] = field(default_factory=tuple)

    def __post_init__(self):
        ts = []
        for i, t in enumerate(self.times):
            if not isinstance(t, (int, float)) or not math.isfinite(t):
                raise ConfigError(f"must be a finite number, got {t!r}", f"arrival.times[{i}]")
            ts.append(float(t))
        object.__setattr__(self, "times", tuple(sorted(ts)))

    @property
    def total(self) -> int:
        return len(self.times)

    def time_of(self, n: int) -> float:
        _in_range(n, self.total)
        return self.times[max(n, 1) - 1]

    def count_at(self, t: float) -> int:
        return bisect.bisect_right(self.times, t + TIME_TOL * max(1.0, abs(t)))

    def to_dict(self) -> dict:
        return {"kind": "empirical", "times": list(self.times)}


# ------------------------------------------------------------------ parse & check


def cost_model_from_dict(d: dict, where: str = "cost") -> CostModel:
    kind = _kind(d, where, ("linear", "piecewise_linear"))
    if kind == "linear":
        return _rebrand(where, "cost", lambda: LinearCost(
            per_unit=_num(d, "per_unit", where), per_batch=_num(d, "per_batch", where, default=0.0)))
    return _rebrand(where, "cost", lambda: PiecewiseLinearCost(_pairs(d, "points", where)))


def final_agg_from_dict(d: dict | None, where: str = "final_agg") -> FinalAggCost:
    if d is None:
        return NO_FINAL_AGG
    kind = _kind(d, where, ("linear", "piecewise_linear"))
    single = d.get("merge_single", False)
    if not isinstance(single, bool):
        raise ConfigError(f"must be true or false, got {single!r}", f"{where}.merge_single")
    if kind == "linear":
        return _rebrand(where, "final_agg", lambda: LinearFinalAgg(
            base=_num(d, "base", where, default=0.0), per_batch=_num(d, "per_batch", where, default=0.0),
            merge_single=single, shared_startup=_num(d, "shared_startup", where, default=0.0)))
    return _rebrand(where, "final_agg", lambda: PiecewiseLinearFinalAgg(
        _pairs(d, "points", where), merge_single=single,
        shared_startup=_num(d, "shared_startup", where, default=0.0)))


def arrival_from_dict(d: dict, start: float = 0.0, where: str = "arrival") -> ArrivalModel:
    """Build an arrival model; ``start`` is when a fixed-rate stream's first unit arrives."""
    kind = _kind(d, where, ("fixed_rate", "profile", "empirical"))
    if kind == "fixed_rate":
        total = d.get("total")
        if total is None:
            raise ConfigError("missing (how many units the window holds)", f"{where}.total")
        return _rebrand(where, "arrival", lambda: FixedRate(rate=_num(d, "rate", where), total=total, start=start))
    if kind == "profile":
        return _rebrand(where, "arrival", lambda: ProfileArrival(_pairs(d, "points", where)))
    times = d.get("times")
    if not isinstance(times, list):
        raise ConfigError("missing or not a list of arrival times", f"{where}.times")
    return _rebrand(where, "arrival", lambda: EmpiricalArrival(tuple(times)))


def _rebrand(where: str, default_prefix: str, build):
    """Run ``build``; re-prefix a ConfigError's field when the model sits elsewhere in a spec."""
    try:
        return build()
    except ConfigError as exc:
        if where == default_prefix or not exc.field or not exc.field.startswith(default_prefix):
            raise
        raise ConfigError(exc.message, where + exc.field[len(default_prefix):]) from None


def _kind(d, where: str, kinds: tuple[str, ...]) -> str:
    if not isinstance(d, dict):
        raise ConfigError(f"must be an object with a 'kind' ({' | '.join(kinds)})", where)
    kind = d.get("kind")
    if kind is None:
        raise ConfigError(f"missing (one of {', '.join(kinds)})", f"{where}.kind")
    if kind not in kinds:
        raise ConfigError(f"unknown kind {kind!r}; expected one of {', '.join(kinds)}", f"{where}.kind")
    return kind


def _num(d: dict, key: str, where: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if v is None:
        raise ConfigError("missing", f"{where}.{key}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"must be a finite number, got {v!r}", f"{where}.{key}")
    return float(v)


def _pairs(d: dict, key: str, where: str) -> tuple[tuple[float, float], ...]:
    v = d.get(key)
    if v is None:
        raise ConfigError("missing", f"{where}.{key}")
    if not isinstance(v, (list, tuple)):
        raise ConfigError("must be a list of [x, y] pairs", f"{where}.{key}")
    out = []
    for i, p in enumerate(v):
        if (not isinstance(p, (list, tuple)) or len(p) != 2
                or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) for c in p)):
            raise ConfigError(f"must be a pair of finite numbers, got {p!r}", f"{where}.{key}[{i}]")
        out.append((float(p[0]), float(p[1])))
    return tuple(out)


def _check_points(points, where: str, *, x_name: str, y_name: str, strictly_increasing_x: bool,
                  min_points: int) -> tuple[tuple[float, float], ...]:
    pts = tuple((float(x), float(y)) for x, y in points)
    if len(pts) < min_points:
        raise ConfigError(f"needs at least {min_points} point(s), got {len(pts)}", where)
    for i in range(len(pts)):
        x, y = pts[i]
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ConfigError("must be finite numbers", f"{where}[{i}]")
        if y < 0:
            raise ConfigError(f"{y_name} must be >= 0, got {y}", f"{where}[{i}]")
        if i:
            (px, py) = pts[i - 1]
            if x <= px if strictly_increasing_x else x < px:
                raise ConfigError(f"{x_name} must increase from point to point ({px} then {x})", f"{where}[{i}]")
            if y < py:
                raise ConfigError(f"{y_name} must not decrease (non-monotone: {py} then {y})", f"{where}[{i}]")
    return pts


def _finite_nonneg(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"must be a finite number >= 0, got {v!r}", name)


def _whole_nonneg(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
        raise ConfigError(f"must be a whole number >= 0, got {v!r}", name)


def _in_range(n: int, total: int) -> None:
    if n < 0 or n > total:
        raise ValueError(f"unit {n} is outside 0..{total}")


#: No final aggregation (the paper's "negligible" case).
NO_FINAL_AGG = LinearFinalAgg()


# ------------------------------------------------------------------- busy time


@dataclass(frozen=True)
class Busy:
    """When one executor is busy with other queries' work: sorted, disjoint ``[start, end)``.

    Several queries on one cluster are planned one after another, earliest deadline first
    (``window.plan.plan_window`` with ``shares``); each plan gets the time the plans before it
    take. The planner then counts only free time: a batch that needs ``d`` seconds and
    ends at ``t`` starts at :meth:`before` ``(t, d)``.

    Two executors. By default work is divisible around busy time: a batch of this query
    fits in the gaps, as on an executor that hands its cores to the earlier deadline's
    tasks as they come. With ``whole=True`` a batch is not divided: it runs in one free gap
    from start to end, as under ``coordination.cluster_turn``, which runs one batch at a time and
    takes none back once started. The empty ``Busy()`` is plain arithmetic:
    ``before(t, d) == t - d``.
    """

    intervals: tuple[tuple[float, float], ...] = ()
    whole: bool = False

    def gaps(self, a: float, b: float) -> list[tuple[float, float]]:
        """The free pieces of ``[a, b]``, in order."""
        out, t = [], a
        for s, e in self.intervals:
            if e <= t:
                continue
            if s >= b:
                break
            if s > t:
                out.append((t, s))
            t = e
        if t < b:
            out.append((t, b))
        return out

    def free(self, a: float, b: float) -> float:
        """Free seconds in ``[a, b]`` (negative when ``b < a``, as ``b - a`` is); with
        ``whole``, the longest free gap there, the most one batch can use."""
        if b <= a or not self.intervals:
            return b - a
        pieces = [e - s for s, e in self.gaps(a, b)]
        if self.whole:
            return max(pieces, default=0.0)
        return sum(pieces)

    def before(self, t: float, d: float) -> float:
        """The latest start ``s`` with ``d`` free seconds in ``[s, t]`` (with ``whole``, in
        one gap: ``[s, s + d]`` is free)."""
        if not self.intervals:
            return t - d
        for s, e in reversed(self.intervals):
            if s >= t:
                continue
            e = min(e, t)
            if t - e >= d or (self.whole and within(d, t - e)):
                return t - d
            if not self.whole:
                d -= t - e
            t = s
        return t - d

    def after(self, t: float, d: float) -> float:
        """The earliest end ``e`` with ``d`` free seconds in ``[t, e]``."""
        return self.used(t, d)[-1][1] if d > 0 and self.intervals else t + d

    def used(self, t: float, d: float) -> list[tuple[float, float]]:
        """The free pieces that ``d`` seconds of work started at ``t`` takes, in order (with
        ``whole``, one: the first gap from ``t`` on that holds it)."""
        if d <= 0:
            return [(t, t)]
        pieces = []
        for s, e in self.intervals:
            if e <= t:
                continue
            if s > t:
                if self.whole and not within(d, s - t):  # up to rounding: before() may place it so
                    t = e
                    continue
                take = d if self.whole else min(d, s - t)
                pieces.append((t, t + take))
                d -= take
                if d <= 0:
                    return pieces
            t = max(t, e)
        pieces.append((t, t + d))
        return pieces

    def plus(self, pieces) -> "Busy":
        """This busy time and ``pieces`` ((start, end) pairs), merged."""
        out: list[list[float]] = []
        for s, e in sorted([*self.intervals, *((float(s), float(e)) for s, e in pieces if e > s)]):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return Busy(tuple((s, e) for s, e in out), self.whole)
