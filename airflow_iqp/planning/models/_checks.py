"""Shared by every model: the float tolerance on seconds and the checks of a model's fields.

A failed check raises :class:`~airflow_iqp.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import math
import sys

from airflow_iqp.errors import ConfigError

#: Relative tolerance for comparing seconds. Costs and arrival times are sums of
#: floats; a plan that meets its deadline "exactly" must not fail on rounding.
TIME_TOL = 1e-9

#: What ``capacity`` returns when a cost model never exceeds the duration.
UNBOUNDED = sys.maxsize


def within(t: float, limit: float) -> bool:
    """``t <= limit`` up to rounding of the float arithmetic."""
    return t <= limit + TIME_TOL * max(1.0, abs(limit))


def steeper_mean_slope(pts) -> float | None:
    """The mean slope from a piecewise model's first point to its last, where it is steeper
    than its last piece (beyond rounding: :func:`within`), else None. Above its last point
    such a model grows at that slope instead of along its last piece: a fit of noisy
    measurements is pooled into a non-decreasing one and may end flat, and a batch (or a
    merge) larger than any measured must not cost what the largest measured one did.
    ``pts``: two or more points, x strictly increasing."""
    (x0, y0), (xa, ya), (xb, yb) = pts[0], pts[-2], pts[-1]
    mean, last = (yb - y0) / (xb - x0), (yb - ya) / (xb - xa)
    return None if within(mean, last) else mean


def check_points(points, where: str, *, x_name: str, y_name: str, strictly_increasing_x: bool,
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


def finite_nonneg(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"must be a finite number >= 0, got {v!r}", name)


def whole_nonneg(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
        raise ConfigError(f"must be a whole number >= 0, got {v!r}", name)


def in_range(n: int, total: int) -> None:
    if n < 0 or n > total:
        raise ValueError(f"unit {n} is outside 0..{total}")
