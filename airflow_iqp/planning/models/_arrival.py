"""Arrival models: InputTime(stream, n) of the paper, when the n-th unit of a window is available."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Protocol

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models._checks import TIME_TOL, check_points, in_range, whole_nonneg


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
        whole_nonneg(self.total, "arrival.total")
        object.__setattr__(self, "total", int(self.total))

    def time_of(self, n: int) -> float:
        in_range(n, self.total)
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
        pts = check_points(self.points, "arrival.points", x_name="time", y_name="cumulative",
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
        in_range(n, self.total)
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
        in_range(n, self.total)
        return self.times[max(n, 1) - 1]

    def count_at(self, t: float) -> int:
        return bisect.bisect_right(self.times, t + TIME_TOL * max(1.0, abs(t)))

    def to_dict(self) -> dict:
        return {"kind": "empirical", "times": list(self.times)}
