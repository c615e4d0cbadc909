"""The dynamic program behind the exact planner (:mod:`airflow_iqp.planning.exact`), on
planning units and the planner's clock:

* **Forward, the fewest batches.** ``E_m(j)`` is the earliest finish of the first ``j``
  units in at most ``m`` batches; it does not decrease in ``j``. A batch of units
  ``i+1 .. j`` starts when its last unit has arrived and the batch before it is done,
  ``max(E_{m-1}(i), ready(j))``. Layer ``m`` only follows prefixes whose finish improved
  in layer ``m-1`` (the others were followed before), and only prefixes that can still be
  part of a plan that meets the deadline: done by ``latest(j)``, the latest finish of the
  first ``j`` units that lets the rest meet it, and leaving the rest no more batches than
  it needs at the least (both from a backward pass that ignores the count). The first
  ``m`` whose plans meet the deadline, final aggregation included, is the fewest batches.
* **Backward, the least cost among those.** For that count ``k``, ``V_r(j)`` is the least
  cost of ``r`` batches that process units ``j+1 .. n`` and end, with the final
  aggregation of ``k`` partials after them, by the deadline. Run as late as possible,
  a suffix starts at the deadline less its final aggregation and its cost, so the
  cheapest suffix is also the one that may start latest: one value per cell is exact.
  Among plans of equal count and cost (up to rounding) it takes the one whose batch
  boundaries come first, so that the last batches are the large ones, as Function 1's are.
"""

from __future__ import annotations

import bisect
import math
from itertools import compress, repeat
from operator import add, sub
from typing import Callable

from airflow_iqp.planning.models import TIME_TOL, within

INF = math.inf

#: Relative tolerance for discarding a prefix that cannot meet the deadline. Pruning only:
#: whether a plan meets its deadline is decided by ``within`` and ``build_plan``.
_PRUNE_TOL = 1e-7

#: ``latest`` is computed exactly when that takes at most this many steps per unit, and
#: bounded in O(n) otherwise (loose deadlines, where there is little to prune).
_EXACT_BOUNDS = 200


class ExactDP:
    """One window on the planner's clock: ``ready[j]`` is when a batch ending at unit ``j``
    may start (``ready[n]``, the last batch's, is the window's end), ``costs[d]`` the seconds
    of a batch of ``d`` units (``last[d]`` for the last batch), ``agg(k)`` the final
    aggregation of ``k`` partials."""

    def __init__(self, ready: list[float], costs: list[float], agg: Callable[[int], float],
                 last: list[float] | None = None):
        self.n = len(ready) - 1
        self.ready, self.costs, self.agg = ready, costs, agg
        self.last = costs if last is None else last
        # The least seconds per unit, for a lower bound on the time the rest of a window takes.
        self.per_unit = min(c / d for table in (costs, self.last) for d, c in enumerate(table) if d)

    def cap(self, seconds: float, costs: list[float] | None = None) -> int:
        """The most units one batch processes in ``seconds`` (costs do not decrease)."""
        return bisect.bisect_right(self.costs if costs is None else costs,
                                   seconds + TIME_TOL * max(1.0, abs(seconds))) - 1

    def solve(self, deadline: float) -> list[int]:
        """Batch sizes in time order: the fewest that meet ``deadline``, then the cheapest;
        if none does, the earliest finish, then the fewest, then the cheapest."""
        agg = self.agg
        finish, ends = self.unlimited()
        found = self.fewest_by(deadline, finish)
        if found:
            return self.cheapest(*found)
        # No plan meets the deadline. The earliest finish is no later than that of any plan:
        # the one that finishes earliest before its final aggregation, or (when that takes
        # many batches and each adds to the final aggregation) one planned with that share
        # of the final aggregation added to each batch. Search up to deadlines closer to
        # this one first, where fewer plans are left to follow: a search up to a deadline at
        # or after the earliest finish finds it.
        count = len(ends)
        bound = finish + agg(count)
        if count > 1 and agg(count) > agg(1):
            bound = min(bound, self.finish(self.unlimited((agg(count) - agg(1)) / (count - 1))[1]))
        for halving in range(16, -1, -1):
            found = self.fewest_by(deadline + (bound - deadline) / 2 ** (halving / 2), finish, earliest=True)
            if found:
                return self.cheapest(*found)
        raise AssertionError(f"no plan found that finishes by {bound}")

    def fewest_by(self, deadline: float, finish: float, earliest: bool = False):
        """``(k, deadline', layers)`` for :meth:`cheapest`: the fewest batches ``k`` that finish
        by ``deadline`` (``deadline' = deadline``), or with ``earliest`` the earliest finish
        ``deadline'`` of any plan that finishes by ``deadline`` and the fewest batches that
        reach it; None if no plan finishes by ``deadline``. ``finish``: :meth:`unlimited`'s."""
        n, agg = self.n, self.agg
        # A plan of m batches finishes no earlier than finish + agg(m): at most ``most`` batches.
        if not within(finish + agg(1), deadline):
            return None
        lo, hi = 1, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if within(finish + agg(mid), deadline) else (lo, mid - 1)
        most = lo
        latest, fewest, least = self.bounds(deadline, most)
        if fewest[0] > most:
            return None
        if earliest:
            finishes, layers = self.forward((latest, fewest, least), most, floor=finish, tighten=deadline)
            first = min(finishes)
            if not within(first, deadline):
                return None
            return next(m for m, f in enumerate(finishes, 1) if within(f, first)), first, layers
        # Search with the fewest batches the suffixes need as the limit first (often the
        # answer: pruning is then at its strongest), then with more.
        limit = fewest[0]
        while True:
            finishes, layers = self.forward((latest, fewest, least), limit, target=deadline)
            if within(finishes[-1], deadline):
                return len(finishes), deadline, layers
            if limit >= most:
                return None
            limit = min(most, 2 * limit)

    # ------------------------------------------------------------------ passes

    def unlimited(self, extra: float = 0.0) -> tuple[float, list[int]]:
        """The earliest finish of the last batch in any number of batches (no final
        aggregation), and the last units of the batches of one plan that reaches it. With
        ``extra`` seconds more per batch: the finish on those costs."""
        n, ready = self.n, self.ready
        costs, last = ([0.0, *(c + extra for c in table[1:])] if extra else table for table in (self.costs, self.last))
        e = [-INF] * n
        for j in range(1, n):
            e[j] = self._earliest_end(e, j, ready[j], costs)
        finish = self._earliest_end(e, n, ready[n], last)
        ends, j, end, table = [], n, finish, last
        while j > 0:  # walk back along one plan that reaches ``finish``
            ends.append(j)
            j = next(i for i in range(j - 1, -1, -1) if within(max(e[i], ready[j]) + table[j - i], end))
            end, table = e[j], costs
        return finish, ends[::-1]

    def finish(self, ends: list[int]) -> float:
        """When the batches ending at units ``ends`` and their final aggregation are done."""
        t, i = -INF, 0
        for j in ends:
            t, i = max(t, self.ready[j]) + (self.last if j == self.n else self.costs)[j - i], j
        return t + self.agg(len(ends))

    def _earliest_end(self, e: list[float], j: int, ready: float, costs: list[float]) -> float:
        """min over i < j of max(e[i], ready) + costs[j - i], for ``e`` non-decreasing."""
        p = bisect.bisect_right(e, ready, 0, j) - 1  # the last prefix done by ``ready``: wait for the input
        best = ready + costs[j - p]
        lo = p + 1  # later prefixes: start when they are done, with a smaller batch
        if lo < j:
            hi = bisect.bisect_left(e, best - costs[1], lo, j)
            lo = max(lo, j - bisect.bisect_left(costs, best - e[lo]) + 1)
            if lo < hi:
                best = min(best, min(map(add, e[lo:hi], costs[j - lo:j - hi:-1])))
        return best

    def bounds(self, deadline: float, most: int) -> tuple[list[float], list[float], int]:
        """Bounds that hold for every plan of at most ``most`` batches that finishes by
        ``deadline``: ``latest[j]``, the latest the first ``j`` units may be done (-inf: never;
        raised slightly for rounding), and ``fewest[j]``, the fewest batches units ``j+1 .. n``
        can take (inf: none).

        They count on the least final aggregation such a plan can have, that of ``fewest[0]``
        batches, found by repeating the pass while it rises (section 3.1's outer loop, turned
        into a bound).
        """
        least = 1
        while True:
            latest, fewest = self._bounds(deadline - self.agg(least))
            if fewest[0] > most or fewest[0] <= least or self.agg(fewest[0]) <= self.agg(least):
                break
            least = fewest[0]
        tol = _PRUNE_TOL * max(1.0, abs(deadline))
        return [t + tol for t in latest], fewest, least

    def _bounds(self, end: float) -> tuple[list[float], list[float]]:
        """``latest`` and ``fewest`` for batches that must all be done by ``end``."""
        n, ready, costs = self.n, self.ready, self.costs
        # Units j+1 .. n take at least ``per_unit`` seconds each (and a batch at least
        # costs[1]) after the first j are done: a bound on ``latest`` that costs O(n).
        latest = [end - max(self.per_unit * (n - j), costs[1]) for j in range(n)]
        # The exact one pushes each batch end c to every start it allows: as many units as
        # fit between ready[c] and latest[c]. Worth it while that is not many more than n.
        exact = sum(self.cap(t - r) for t, r in zip(latest[1:], ready[1:n])) <= _EXACT_BOUNDS * n
        if exact:
            latest = [-INF] * n
        fewest = [INF] * n
        # Backwards from the last batch: a batch of units a+1 .. c done by latest[c] (``end``
        # for c = n) may start at every a down to where its cost no longer fits after ready[c].
        # ``fewest`` does not rise in j and grows as c falls: only units not yet reached get it.
        c, t, k, reached, table = n, end, 0, n, self.last
        while c > 0:
            a = max(0, c - self.cap(t - ready[c], table))
            if a < c:
                if exact:
                    latest[a:c] = map(max, latest[a:c], map(sub, repeat(t), table[c - a:0:-1]))
                if a < reached:
                    fewest[a:reached] = repeat(k + 1, reached - a)
                    reached = a
            c -= 1
            while c > 0 and fewest[c] == INF:
                c -= 1
            t, k, table = latest[c], fewest[c], costs
        return latest, fewest

    def forward(self, bounds: tuple[list[float], list[float], int], most: int, *, target: float | None = None,
                floor: float = -INF, tighten: float | None = None) -> tuple[list[float], list[list[float]]]:
        """Layer by layer, ``finishes[m-1]``: the earliest finish, final aggregation included,
        of at most ``m`` batches; until one meets ``target``, or no prefix improves any more.

        Only prefixes that can still be part of a plan of at most ``most`` batches that
        finishes in time (:meth:`bounds`: ``latest``, ``fewest``, ``least``) are followed. A
        prefix of m batches before units that need ``fewest[j]`` more is part of a plan whose
        final aggregation is that of m + fewest[j] batches at least: it must be done that
        much earlier than ``latest[j]`` says (a suffix's latest start moves back at least as
        much as its deadline does). Without a target, ``most`` falls as the earliest finish
        so far does, a plan of m batches finishing no earlier than ``floor + agg(m)``; and
        with ``tighten``, the deadline the bounds are for, the bounds are recomputed for the
        earliest finish so far once that is well before it.

        ``layers[m][j]``: when the first ``j`` units are done in at most ``m`` batches, for
        :meth:`cheapest` (exact for the prefixes it follows; for the others a time some
        plan reaches).
        """
        n, ready, costs, agg = self.n, self.ready, self.costs, self.agg
        latest, fewest, least = bounds
        over = [max(0.0, agg(k) - agg(least)) for k in range(n + 1)]  # final aggregation beyond the least
        e = [-INF] + [INF] * (n - 1)
        layers = [e]
        finishes: list[float] = []
        changed, m, low = [0], 0, 1
        while changed:
            m += 1
            while low < n and fewest[low] > most - m:  # fewer units done leave too many batches
                low += 1
            # The units a batch after a changed prefix i can end at: up to where a later
            # prefix is done before the batch's input is there (then that prefix is the better one).
            band, top = [], 0
            for i in changed:
                a = max(i + 1, low, top)
                b = max(i + 2, bisect.bisect_left(ready, e[i + 1], i + 2, n)) if i + 1 < n else a
                if a < b:
                    band.extend(range(a, b))
                    top = b
            nxt = e[:]
            for j in band:
                nxt[j] = min(nxt[j], self._earliest_end(e, j, ready[j], costs))
            finishes.append(self._earliest_end(e, n, ready[n], self.last) + agg(m))
            if target is not None:
                if within(finishes[-1], target):
                    break
            else:
                first = min(finishes)
                while most > m and within(first, floor + agg(most)):
                    most -= 1
                if m >= most:
                    break
                if tighten is not None and first < tighten - (tighten - floor) / 8:
                    tighten = first + _PRUNE_TOL * max(1.0, abs(first))
                    latest, fewest, least = self.bounds(tighten, most)
                    over = [max(0.0, agg(k) - agg(least)) for k in range(n + 1)]
                    while low < n and fewest[low] > most - m:
                        low += 1
            changed = [j for j in band if nxt[j] < e[j] and nxt[j] <= latest[j] - over[m + fewest[j]]]
            # Prefixes not followed keep an earlier layer's finish: one that some plan reaches,
            # but perhaps later than that of more units. The first j units are done by the time
            # any more are: keep e non-decreasing, as the search needs (and exact where it matters).
            for j in reversed(band):
                t, i = nxt[j], j - 1
                while nxt[i] > t:
                    nxt[i] = t
                    i -= 1
            e = nxt
            layers.append(e)
        return finishes, layers

    def cheapest(self, k: int, deadline: float, layers: list[list[float]]) -> list[int]:
        """The least-cost ``k`` batches that end, final aggregation included, by ``deadline``.

        ``layers[m][j]``: when the first j units can be done in at most m batches (from
        :meth:`forward`; exact for every prefix of a plan that meets the deadline).
        """
        n, ready, costs = self.n, self.ready, self.costs
        end = deadline - self.agg(k)  # when the last batch must be done
        tol = _PRUNE_TOL * max(1.0, abs(deadline))
        # suffix[r-1][j]: the least cost of r batches for units j+1 .. n that end by ``end``
        # and that k - r batches for the first j units can be done before (inf: none).
        first = max(0 if k == 1 else 1, n - self.cap(end - ready[n], self.last))
        cur = [INF] * n
        cur[first:] = self.last[n - first:0:-1]
        suffix = [cur]
        live = self._keep(cur, range(first, n if k > 1 else min(n, 1)), layers[k - 1], end + tol)
        for r in range(2, k + 1):
            prev, cur = suffix[-1], [INF] * n
            done = layers[k - r]  # non-decreasing in j
            lo, hi = (1, n) if r < k else (0, 1)  # where r batches may start: the first one at unit 0
            reached = bytearray(n)
            for c in live:
                v = prev[c]
                # Units a+1 .. c fit between ready[c] and the suffix's start, after a prefix
                # done by then (so at the latest before end - v - costs[1]).
                a = max(lo, c - self.cap(end - v - ready[c]))
                b = min(hi, c, bisect.bisect_right(done, end + tol - v - costs[1], 0, c))
                if a < b:
                    cur[a:b] = map(min, cur[a:b], map(add, costs[c - a:c - b:-1], repeat(v)))
                    reached[a:b] = bytes([1]) * (b - a)
            suffix.append(cur)
            live = self._keep(cur, compress(range(n), reached), done, end + tol)
        if not live or live[0] != 0:
            raise AssertionError(f"the forward search found {k} batches that meet {deadline}; the backward none")
        # Follow the cheapest plan from the start, taking the earliest boundary among equals.
        sizes, j = [], 0
        for r in range(k, 1, -1):
            v, prev = suffix[r - 1][j], suffix[r - 2]
            c = next(c for c in range(j + 1, n) if costs[c - j] + prev[c] <= v + 1e-9 * max(1.0, v)
                     and within(ready[c], end - costs[c - j] - prev[c]))
            sizes.append(c - j)
            j = c
        sizes.append(n - j)
        return sizes

    @staticmethod
    def _keep(cur: list[float], js, done: list[float], end: float) -> list[int]:
        """The j of ``js`` whose suffix (cost ``cur[j]``, ending by ``end``) a prefix done by
        ``done[j]`` can precede; the others are set to inf."""
        live = []
        for j in js:
            if done[j] <= end - cur[j]:
                live.append(j)
            else:
                cur[j] = INF
        return live
