"""A group: queries that read the same streams over the same window, planned once.

Each of the group's batches is one Spark job that reads its units once and writes one
partial per query (:func:`airflow_iqp.spark.batch.execute_shared_batch`); each query keeps
its own final step, result and deadline. The group's batch costs every query's per-batch
step with one start-up (:func:`~airflow_iqp.planning.models.shared_batch_cost`) and its
merges one after another (:func:`~airflow_iqp.planning.models.summed_final_agg`), against
the earliest deadline among the queries; once the group's own batches are measured, its
cost history replaces the sum. With a fused tail, one job runs the last batch and every
query's merge, earliest deadline first, so a query due later waits for those due before
it, not they for it: the shared plan is held to the tightest of those staggered deadlines
(:func:`tail_deadline`), not to the earliest one. Each query is planned on its own too: when that costs less
than sharing (their deadlines are far apart), or meets deadlines that sharing misses, the
plan says so and why, before any data moves, and which queries to give DAGs of their own.
A group's final tasks all wait for its batches, so its batches stay shared.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_iqp.backends.base import Backend
from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import shared_batch_cost, shared_step, summed_final_agg
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, clock
from airflow_iqp.window.costs import own_models
from airflow_iqp.window.plan import WindowPlan, plan_window, store_plan


def member_config(cfg: QueryConfig, member: str) -> QueryConfig:
    """One member's settings: the group's, under the member's id (the group, not each
    member, is what a named cluster registers)."""
    return replace(cfg, query=member, members={}, cluster=None)


def plan_group(cfg: QueryConfig, window_start: float, window_end: float, now: float | None = None,
               store: bool = False) -> WindowPlan:
    """Plan one window of the group ``cfg`` (``cfg.members``: query id -> deadline offset):
    shared batches, compared with each member planned on its own; the plan's ``models`` say
    which costs less and why, and ``advice`` what to do when apart would do better. With
    ``store``, the plan is stored in the group's window."""
    if not cfg.members:
        raise ConfigError("a group needs its member queries", "members")
    # Earliest deadline first: the order the shared jobs write the members' partials and
    # a fused tail their results in.
    order = sorted(cfg.members, key=lambda m: (cfg.members[m], m))
    members = {m: member_config(cfg, m) for m in order}
    by_member = {m: own_models(c) for m, c in members.items()}
    models = list(by_member.values())
    share = Backend.named(cfg.backend, "backend").group_fixed_share
    # Each member's merge runs even after a single batch.
    merges = {m: (c, replace(a, merge_single=True)) for m, (c, a) in by_member.items()}
    group = replace(cfg, cost_hint=shared_batch_cost([c for c, _a in models], share).to_dict(),
                    final_agg_hint=summed_final_agg([a for _c, a in models]).to_dict())
    first = min(cfg.members.values())
    shared = plan_window(group, window_start, window_end, window_end + first, now)
    if cfg.fuse_tail and not shared.backfill:
        shared = _tail_plan(group, shared, merges, share, window_start, window_end, now)
    apart = {m: plan_window(c, window_start, window_end, window_end + cfg.members[m], now)
             for m, c in members.items()}
    apart_cost = sum(wp.plan.total_cost for wp in apart.values())
    apart_met = all(wp.plan.feasible for wp in apart.values())
    pays, why = _share(shared, apart_cost, apart_met)
    later = sorted(m for m, off in cfg.members.items() if off > first)
    advice = "" if pays else (f"give {', '.join(later) or 'these queries'} DAGs of their own (iqp_dag), "
                              f"or the group a later deadline")
    entries = [b.with_(members=tuple(members), label=f"{b.label} · {len(members)} queries") for b in shared.batches]
    if cfg.fuse_tail and not shared.backfill and shared.plan.batches:
        # The tail starts its members by their deadlines and these seconds (most_in_time).
        steps = member_steps(merges, shared.plan.batches[-1].units, len(shared.plan.batches), share)
        entries[-1] = entries[-1].with_(member_deadlines=tuple(window_end + cfg.members[m] for m in members),
                                        member_seconds=tuple(round(steps[m], 3) for m in members))
    wp = replace(shared, batches=entries, advice=advice,
                 models=f"{shared.models}; shared by {', '.join(members)}: {why}" + (f"; {advice}" if advice else ""))
    if store:
        store_plan(wp)
    return wp


#: How many times the shared plan of a fused tail is held to a new staggered deadline.
TAIL_DEADLINE_ROUNDS = 3


def tail_deadline(by_member: dict, offsets: dict, units: int, partials: int, share: float) -> float:
    """The deadline offset that a fused tail's plan, with the members' summed costs, is held
    to so that every member meets its own: the tail's job runs the last batch's ``units``
    and merges ``partials`` partials for one member after another, earliest deadline first
    (``by_member``: member -> (batch cost, merge cost), in that order), so member i's result
    is written before the members after it work. The summed plan finishing by
    ``min_i(offset_i + after_i)``, where ``after_i`` is what the members after i add, has
    every member finish by its own offset. ``after_i`` counts each later member's batch
    step with ``share`` of its start-up (:func:`~airflow_iqp.planning.models.shared_step`, the
    backend's ``group_fixed_share``) and its merge, both unscaled: the learned margins make
    the plan's costs larger, never these.
    """
    order = list(by_member)
    step = member_steps(by_member, units, partials, share)
    return min(offsets[m] + sum(step[n] for n in order[i + 1:]) for i, m in enumerate(order))


def member_steps(by_member: dict, units: int, partials: int, share: float) -> dict[str, float]:
    """What each member does in a fused tail, unscaled: its step on the last batch's
    ``units`` with ``share`` of its start-up, and its merge of ``partials`` partials."""
    return {m: shared_step(c, units, share) + a.cost(partials) for m, (c, a) in by_member.items()}


def _tail_plan(group: QueryConfig, shared: WindowPlan, by_member: dict, share: float, window_start: float,
               window_end: float, now: float | None) -> WindowPlan:
    """The shared plan of a group with a fused tail, held to :func:`tail_deadline` rather
    than to the earliest member's deadline: planned again until the deadline it was
    planned against is one its own last batch allows (each round's plan has a last batch at
    least as large, so its staggered deadline is no earlier); the plan held to the
    earliest deadline if no round's is."""
    best, offset = shared, min(group.members.values())
    for _ in range(TAIL_DEADLINE_ROUNDS):
        plan = best.plan
        allowed = tail_deadline(by_member, group.members, plan.batches[-1].units if plan.batches else 0,
                                len(plan.batches), share)
        if allowed <= offset + 1e-6:
            break
        wp = plan_window(group, window_start, window_end, window_end + allowed, now)
        if not wp.plan.batches:
            break
        again = tail_deadline(by_member, group.members, wp.plan.batches[-1].units, len(wp.plan.batches), share)
        if again + 1e-6 < allowed:  # its last batch is smaller: the deadline it had does not hold for it
            break
        best, offset = wp, allowed
    if best is shared:
        return shared
    return replace(best, models=f"{best.models}; a fused tail merges the members earliest deadline first: planned "
                                f"to {offset:.1f} s after the window's end, each member by its own")


def _share(shared: WindowPlan, apart_cost: float, apart_met: bool) -> tuple[bool, str]:
    """Whether sharing the batches does at least as well as planning each query on its own, and why."""
    cost = shared.plan.total_cost
    if shared.backfill:
        return True, "a backfill reads the window once"
    if shared.plan.feasible and cost <= apart_cost:
        return True, f"{cost:.1f} s of planned work against {apart_cost:.1f} s apart"
    if not shared.plan.feasible and apart_met:
        return False, (f"the shared batches must be done by {clock(shared.deadline)} and cannot; "
                       f"apart, each query would meet its own")
    if shared.plan.feasible and apart_met:
        return False, (f"sharing costs {cost:.1f} s of planned work against {apart_cost:.1f} s apart: the "
                       f"later-due queries would run fewer, larger batches on their own")
    return True, f"{cost:.1f} s of planned work against {apart_cost:.1f} s apart, and apart misses a deadline too"


def entries_of(entries: list[Batch], query: str) -> list[Batch]:
    """A member's batches among a group's plan entries: those shared with it."""
    return [b for b in entries if query in b.members]
