"""Safety margins learned from history: how much longer batches take in a deployment than
the cost model they were planned with says (after Mayer et al.'s model-based controller).

A deployment adds to what an idle calibration measured: the orchestrator starting each
task (a fixed cost per batch, ``dispatch``) and the load of the other queries on the
cluster (a factor on every cost, ``scale``). Given batches' modelled seconds and what
they took, :func:`learn_margins` finds the least pessimistic pair that covers a high
quantile of them: ``scale * modelled + dispatch >= took`` for at least that share of the
batches, with the smallest total planned seconds over them. The planner then plans with
``scaled(model, scale)`` plus ``dispatch`` per batch.

Pure Python (layer 1): no Airflow, Spark or OR-Tools imports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from airflow_iqp.errors import ConfigError

#: The share of measured batches the learned margins cover.
QUANTILE = 0.9
#: Fewer measured batches than this learn nothing: the defaults hold.
MIN_SAMPLES = 5
#: The learned scale stays within these: below 1 the plan would be bolder than its model,
#: and above the upper bound a measurement is more likely a fault than a load.
SCALE_BOUNDS = (1.0, 4.0)


@dataclass(frozen=True)
class Margins:
    """What the planner adds to a cost model: every cost times ``scale``, plus ``dispatch``
    seconds per batch; from ``samples`` measured batches (0: the defaults)."""

    scale: float = 1.0
    dispatch: float = 0.0
    samples: int = 0
    covered: float | None = None  #: the share of the samples the margins cover

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if not self.samples:
            return f"costs x {self.scale:g} and {self.dispatch:g} s per batch (no history yet)"
        return (f"costs x {self.scale:.2f} and {self.dispatch:.2f} s per batch, learned from {self.samples} "
                f"batches (covering {self.covered:.0%})")


def learn_margins(samples: Sequence[tuple[float, float]], *, scale: float | None = None,
                  dispatch: float | None = None, default: Margins = Margins(),
                  quantile: float = QUANTILE, min_samples: int = MIN_SAMPLES) -> Margins:
    """The margins that cover ``quantile`` of ``samples`` (modelled seconds, seconds taken)
    at the least planned total; ``scale`` or ``dispatch``, when given, are kept as they are
    and only the other is learned. Fewer than ``min_samples`` samples give ``default`` (with
    any given value in place of its own)."""
    if not 0 < quantile <= 1:
        raise ConfigError(f"must be in (0, 1], got {quantile!r}", "quantile")
    pairs = [(float(m), float(t)) for m, t in samples
             if m > 0 and t >= 0 and math.isfinite(m) and math.isfinite(t)]
    fixed = Margins(scale=default.scale if scale is None else scale,
                    dispatch=default.dispatch if dispatch is None else dispatch)
    if len(pairs) < min_samples or (scale is not None and dispatch is not None):
        return fixed if len(pairs) < min_samples else _with_coverage(fixed, pairs)
    need = math.ceil(quantile * len(pairs))  # batches that must be covered
    if scale is not None:  # the least dispatch that covers them at that scale
        excess = sorted(t - scale * m for m, t in pairs)
        return _with_coverage(Margins(scale=scale, dispatch=max(0.0, excess[need - 1])), pairs)
    low, high = SCALE_BOUNDS
    # Each candidate dispatch is one batch's excess over its model (or zero); for each, the
    # least scale that covers ``need`` batches; the pair with the least planned total wins.
    dispatches = [dispatch] if dispatch is not None else sorted({0.0, *(max(0.0, t - m) for m, t in pairs)})
    best, best_total = fixed, math.inf
    for d in dispatches:
        needed = sorted((t - d) / m for m, t in pairs)
        s = min(high, max(low, needed[need - 1]))
        total = sum(s * m + d for m, _t in pairs)
        if total < best_total - 1e-9:
            best, best_total = Margins(scale=s, dispatch=d), total
    return _with_coverage(best, pairs)


def _with_coverage(m: Margins, pairs: list[tuple[float, float]]) -> Margins:
    covered = sum(1 for mod, took in pairs if m.scale * mod + m.dispatch >= took - 1e-9) / len(pairs)
    return Margins(scale=round(m.scale, 4), dispatch=round(m.dispatch, 4), samples=len(pairs),
                   covered=round(covered, 4))
