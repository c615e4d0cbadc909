"""MinBatch sizing (section 4.1) and the slack and laxity of a query.

Pure Python (layer 1). The simulator and the Airflow runtime both call these
functions; there is no second copy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import CostModel, FinalAggCost, within


def batched_cost(cost: CostModel, final_agg: FinalAggCost, total: int, size: int) -> float:
    """minCompCost with batches of ``size`` units: full batches, the remainder, the final merge."""
    if total <= 0:
        return 0.0
    full, rest = divmod(total, size)
    k = full + (1 if rest else 0)
    return full * cost.cost(size) + cost.cost(rest) + final_agg.cost(k)


@dataclass(frozen=True)
class MinBatch:
    """The outcome of FindMinBatchSize."""

    size: int            #: units per MinBatch
    batches: int         #: how many MinBatches the window's units make
    total_cost: float    #: their cost, final aggregation included
    single_cost: float   #: minCompCost of one batch of all units
    bound_kept: bool     #: total_cost <= (1 + rsf) * single_cost
    reason: str = ""     #: why the bound could not be kept, if it could not

    @property
    def overhead(self) -> float:
        """Extra cost over one single batch, as a fraction of it."""
        return self.total_cost / self.single_cost - 1 if self.single_cost else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def min_batch_size(cost: CostModel, final_agg: FinalAggCost, total: int, rsf: float,
                   c_max: float | None = None) -> MinBatch:
    """FindMinBatchSize of Algorithm 2: the smallest batch size within the resource slack.

    The smallest ``x`` whose total cost over the window, batches of ``x`` units plus the
    final aggregation, stays within ``(1 + rsf)`` times the cost of one batch of all
    ``total`` units, and whose own batch cost stays within ``c_max`` seconds. When
    ``c_max`` caps the size below what ``rsf`` needs, the capped size is returned with
    ``bound_kept=False`` and a reason: the cost bound cannot be kept.

    One batch of all units costs what it costs as it runs: with a final aggregation that
    also merges a single batch (``merge_single``), its merge is part of it. Without
    ``c_max`` the bound is therefore always kept (one batch of all units is within it).
    """
    if not isinstance(rsf, (int, float)) or rsf < 0:
        raise ConfigError(f"must be a number >= 0, got {rsf!r}", "rsf")
    if c_max is not None and c_max <= 0:
        raise ConfigError(f"must be > 0 seconds, got {c_max!r}", "c_max")
    if total <= 0:
        return MinBatch(size=0, batches=0, total_cost=0.0, single_cost=0.0, bound_kept=True)
    single = batched_cost(cost, final_agg, total, total)
    bound = (1 + rsf) * single
    cap = total if c_max is None else min(total, cost.capacity(c_max))
    if cap < 1:
        raise ConfigError(f"a batch of one unit costs {cost.cost(1):g} s, more than c_max ({c_max:g} s)", "c_max")
    size = next((x for x in range(1, cap + 1) if within(batched_cost(cost, final_agg, total, x), bound)), None)
    if size is not None:
        return _minbatch(cost, final_agg, total, size, single, True, "")
    reason = (f"c_max ({c_max:g} s) caps the batch at {cap} units, which costs "
              f"{batched_cost(cost, final_agg, total, cap):g} s in all, more than (1 + rsf) x {single:g} = {bound:g} s")
    return _minbatch(cost, final_agg, total, cap, single, False, reason)


def _minbatch(cost, final_agg, total, size, single, kept, reason) -> MinBatch:
    return MinBatch(size=size, batches=-(-total // size), total_cost=batched_cost(cost, final_agg, total, size),
                    single_cost=single, bound_kept=kept, reason=reason)


def slack(deadline: float, window_end: float, single_cost: float) -> float:
    """slackTime of eq. (2): how long one batch after the window end could still wait."""
    return deadline - window_end - single_cost


def laxity(deadline: float, now: float, remaining_cost: float) -> float:
    """laxity of eq. (9): time to spare if the remaining work started now and ran back to back."""
    return deadline - now - remaining_cost
