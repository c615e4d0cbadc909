"""Final-aggregation models: minCompCostAgg of the paper, the seconds to merge k partials."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol

from airflow_iqp.planning.models._checks import check_points, finite_nonneg, steeper_mean_slope


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
        finite_nonneg(self.base, "final_agg.base")
        finite_nonneg(self.per_batch, "final_agg.per_batch")
        finite_nonneg(self.shared_startup, "final_agg.shared_startup")

    def cost(self, k: int) -> float:
        if k < (1 if self.merge_single else 2):
            return 0.0
        return max(0.0, self.base + self.per_batch * k - self.shared_startup)

    def to_dict(self) -> dict:
        return _agg_flags({"kind": "linear", "base": self.base, "per_batch": self.per_batch}, self)


@dataclass(frozen=True)
class PiecewiseLinearFinalAgg:
    """Seconds to merge ``k`` partials, linear between ``(batches, seconds)`` points.

    Held constant below the first point. Above the last one it grows along the last piece,
    or along the mean slope from the first point to the last where that is steeper
    (:func:`~airflow_iqp.planning.models._checks.steeper_mean_slope`). Zero for ``k <= 1``, unless
    ``merge_single`` (the final step runs even for a single batch; ``k = 1`` then costs the
    curve's value). ``shared_startup`` as for :class:`LinearFinalAgg`.
    """

    points: tuple[tuple[float, float], ...]
    merge_single: bool = False
    shared_startup: float = 0.0

    def __post_init__(self):
        pts = check_points(self.points, "final_agg.points", x_name="batches", y_name="seconds",
                            strictly_increasing_x=True, min_points=1)
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_xs", [p[0] for p in pts])
        object.__setattr__(self, "_beyond", steeper_mean_slope(pts) if len(pts) > 1 else None)
        finite_nonneg(self.shared_startup, "final_agg.shared_startup")

    def cost(self, k: int) -> float:
        if k < (1 if self.merge_single else 2):
            return 0.0
        pts = self.points
        if len(pts) == 1 or k <= pts[0][0]:
            y = pts[0][1]
        elif k > pts[-1][0]:
            (x0, y0), (x1, y1) = pts[-2], pts[-1]
            y = y1 + (self._beyond if self._beyond is not None else (y1 - y0) / (x1 - x0)) * (k - x1)
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


#: No final aggregation (the paper's "negligible" case).
NO_FINAL_AGG = LinearFinalAgg()
