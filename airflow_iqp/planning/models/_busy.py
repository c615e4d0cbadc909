"""Other queries' executor time, which a plan must leave free."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_iqp.planning.models._checks import within


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
