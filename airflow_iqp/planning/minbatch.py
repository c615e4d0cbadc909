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
                   c_max: float | None = None, after_end: float | None = None,
                   max_batches: int | None = None) -> MinBatch:
    """FindMinBatchSize of Algorithm 2: the smallest batch size within the resource slack.

    The smallest ``x`` whose total cost over the window, batches of ``x`` units plus the
    final aggregation, stays within ``(1 + rsf)`` times the cost of one batch of all
    ``total`` units, and whose own batch cost stays within ``c_max`` seconds. When
    ``c_max`` caps the size below what ``rsf`` needs, the capped size is returned with
    ``bound_kept=False`` and a reason: the cost bound cannot be kept.

    One batch of all units costs what it costs as it runs: with a final aggregation that
    also merges a single batch (``merge_single``), its merge is part of it. Without
    ``c_max`` the bound is therefore always kept (one batch of all units is within it).

    ``after_end``: the seconds the deadline leaves after the window's end. The last
    MinBatch's units are complete only then, so that batch and the final aggregation run
    after it (:func:`after_end_cost`): the paper leaves Cmax to "the application latency
    requirements", and this is the one a deadline sets. Only sizes that fit it are taken.
    When none of them keeps the bound, the one that leaves the most of the deadline
    (``bound_kept=False``): on a shared cluster, queries due later run their last batches
    after this one's. When no size fits, the same, with a reason that says the deadline
    cannot be met. ``max_batches``: no size that makes more batches is taken.
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
    lo = -(-total // max_batches) if max_batches else 1
    sizes = range(lo, max(cap, lo) + 1)
    after = lambda x: after_end_cost(cost, final_agg, total, x)  # noqa: E731
    fitting = [x for x in sizes if after_end is None or within(after(x), after_end)]
    size = next((x for x in fitting if within(batched_cost(cost, final_agg, total, x), bound)), None)
    if size is not None:
        return _minbatch(cost, final_agg, total, size, single, True, "")
    if after_end is None:  # c_max (or max_batches) alone: the cheapest size it leaves
        size = min(sizes, key=lambda x: (batched_cost(cost, final_agg, total, x), -x))
        reason = (f"c_max ({c_max:g} s) caps the batch at {cap} units" if cap < max(lo, total) else
                  f"max_batches ({max_batches}) needs batches of {lo} units or more")
    else:
        size = min(fitting or sizes, key=lambda x: (after(x), batched_cost(cost, final_agg, total, x)))
        reason = (f"the deadline leaves {after_end:g} s after the window's end, and the last MinBatch and the merge "
                  f"take {after(size):g} s at the least (batches of {size} units)" if not fitting else
                  f"the deadline leaves {after_end:g} s after the window's end, which only batches of "
                  f"{min(fitting)} to {max(fitting)} units fit" + (f" within c_max ({c_max:g} s)" if c_max else ""))
    reason += (f": batches of {size} units cost {batched_cost(cost, final_agg, total, size):g} s in all, "
               f"more than (1 + rsf) x {single:g} = {bound:g} s")
    return _minbatch(cost, final_agg, total, size, single, False, reason)


def after_end_cost(cost: CostModel, final_agg: FinalAggCost, total: int, size: int) -> float:
    """Seconds after the window's end with batches of ``size`` units: the last batch and the
    final aggregation of every batch. The last batch counts as a whole MinBatch even when it
    is a smaller remainder: the MinBatch before it is then ready only that much before the
    window's end, and may still be running."""
    return cost.cost(min(size, total)) + final_agg.cost(-(-total // size))


def _minbatch(cost, final_agg, total, size, single, kept, reason) -> MinBatch:
    return MinBatch(size=size, batches=-(-total // size), total_cost=batched_cost(cost, final_agg, total, size),
                    single_cost=single, bound_kept=kept, reason=reason)


def slack(deadline: float, window_end: float, single_cost: float) -> float:
    """slackTime of eq. (2): how long one batch after the window end could still wait."""
    return deadline - window_end - single_cost


def laxity(deadline: float, now: float, remaining_cost: float) -> float:
    """laxity of eq. (9): time to spare if the remaining work started now and ran back to back."""
    return deadline - now - remaining_cost
