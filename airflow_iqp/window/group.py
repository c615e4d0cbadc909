"""A group: queries that read the same streams over the same window, planned once.

Each of the group's batches is one Spark job that reads its units once and writes one
partial per query (:func:`airflow_iqp.spark.batch.execute_shared_batch`); each query keeps
its own final step, result and deadline. The group's batch costs every query's per-batch
step with one start-up (:func:`~airflow_iqp.planning.models.shared_batch_cost`) and its
merges one after another (:func:`~airflow_iqp.planning.models.summed_final_agg`), against
the earliest deadline among the queries; once the group's own batches are measured, its
cost history replaces the sum. Each query is planned on its own too: when that costs less
than sharing (their deadlines are far apart), or meets deadlines that sharing misses, the
plan says so and why, before any data moves, and which queries to give DAGs of their own.
A group's final tasks all wait for its batches, so its batches stay shared.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import shared_batch_cost, summed_final_agg
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
    members = {m: member_config(cfg, m) for m in cfg.members}
    models = [own_models(c) for c in members.values()]
    group = replace(cfg, cost_hint=shared_batch_cost([c for c, _a in models]).to_dict(),
                    final_agg_hint=summed_final_agg([a for _c, a in models]).to_dict())
    first = min(cfg.members.values())
    shared = plan_window(group, window_start, window_end, window_end + first, now)
    apart = {m: plan_window(c, window_start, window_end, window_end + cfg.members[m], now)
             for m, c in members.items()}
    apart_cost = sum(wp.plan.total_cost for wp in apart.values())
    apart_met = all(wp.plan.feasible for wp in apart.values())
    pays, why = _share(shared, apart_cost, apart_met)
    later = sorted(m for m, off in cfg.members.items() if off > first)
    advice = "" if pays else (f"give {', '.join(later) or 'these queries'} DAGs of their own (iqp_dag), "
                              f"or the group a later deadline")
    entries = [b.with_(members=tuple(members), label=f"{b.label} · {len(members)} queries") for b in shared.batches]
    wp = replace(shared, batches=entries, advice=advice,
                 models=f"{shared.models}; shared by {', '.join(members)}: {why}" + (f"; {advice}" if advice else ""))
    if store:
        store_plan(wp)
    return wp


def _share(shared: WindowPlan, apart_cost: float, apart_met: bool) -> tuple[bool, str]:
    """Whether sharing the batches does at least as well as planning each query on its own, and why."""
    cost = shared.plan.total_cost
    if shared.backfill:
        return True, "a backfill reads the window once"
    if shared.plan.feasible and cost <= apart_cost:
        return True, f"{cost:.1f} s of planned work against {apart_cost:.1f} s apart"
    if not shared.plan.feasible and apart_met:
        return False, (f"the shared batches must meet the earliest deadline ({clock(shared.deadline)}) and cannot; "
                       f"apart, each query would meet its own")
    if shared.plan.feasible and apart_met:
        return False, (f"sharing costs {cost:.1f} s of planned work against {apart_cost:.1f} s apart: the deadlines "
                       f"are far apart, and the later-due queries' batches would be larger on their own")
    return True, f"{cost:.1f} s of planned work against {apart_cost:.1f} s apart, and apart misses a deadline too"


def entries_of(entries: list[Batch], query: str) -> list[Batch]:
    """A member's batches among a group's plan entries: those shared with it."""
    return [b for b in entries if query in b.members]
