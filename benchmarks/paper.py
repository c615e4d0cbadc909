"""The multi-query protocol of the paper's section 7.4, as scenarios for the simulator.

Queries share one window of ``units`` units at ``rate`` units/s. One query, drawn at
random, gets ``deadline = window_end + delta * cost_1 + c_max``; each next query's
deadline is staggered by its own single-batch cost, ``deadline_i = deadline_{i-1} +
delta * cost_i`` (the paper's rule when windows coincide). ``delta`` of 1 is "1D".

The query cost models come from a JSON file of the form
``{"units": 4500, "queries": [{"id", "cost": {...}, "final_agg": {...}}, ...]}`` whose
costs are for the paper's window of 4500 units. Pure Python: the planning layer and the input profiles.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from airflow_iqp.errors import ConfigError
from airflow_iqp.inputs.profiles import PROFILES, arrival_offsets
from airflow_iqp.planning.models import cost_model_from_dict
from airflow_iqp.planning.simulate import Scenario

DELTAS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1)


def load_models(path: str | Path) -> dict:
    d = json.loads(Path(path).read_text())
    if not isinstance(d.get("queries"), list) or not d["queries"]:
        raise ConfigError(f"{path} has no list of queries", "queries")
    return d


def models_from_calibration(history: str | Path, backend: str, calibrated_units: int, units: int = 4500,
                            queries: list[str] | None = None) -> dict:
    """The scenario's query models from this project's own calibrations: each query's newest
    ``airflow-iqp calibrate`` fit on ``backend`` in the cost history at ``history``, for a
    window of ``calibrated_units`` units, stretched to the protocol's ``units`` units over
    the same data (a batch of n protocol units reads what n * calibrated_units / units of the
    calibrated ones held). Linear and piecewise-linear fits; ``queries`` (default: every
    query with a fit), in that order."""
    fits: dict[str, dict] = {}
    for line in Path(history).read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if r.get("kind") == "fit" and r.get("backend") == backend:
            fits[r["query"]] = r  # the newest last
    wanted = queries or list(fits)
    missing = [q for q in wanted if q not in fits]
    if missing:
        raise ConfigError(f"{history} has no {backend} fit of {', '.join(missing)}", "queries")
    stretch = units / calibrated_units
    return {"units": units, "source": f"airflow-iqp calibrate on {backend}, {calibrated_units} units stretched to "
                                      f"{units} ({history})",
            "queries": [{"id": q, "cost": _stretched(fits[q]["cost"], stretch), "final_agg": fits[q]["final_agg"]}
                        for q in wanted]}


def _stretched(model: dict, stretch: float) -> dict:
    """A batch cost model over units ``stretch`` times as many, each that much smaller."""
    if model.get("kind") == "linear":
        return {**model, "per_unit": model["per_unit"] / stretch}
    if model.get("kind") == "piecewise_linear":
        return {**model, "points": [[x * stretch, y] for x, y in model["points"]]}
    raise ConfigError(f"cannot stretch a {model.get('kind')!r} cost model", "cost")


#: Figure 9's input rates: FR, the faster VR1 and bursty VR2, and VR3 and VR4, slower
#: with their last units 20 s and 7 s late.
FIGURE_9 = {"FR": ("fixed", None), "VR1": ("faster", None), "VR2": ("bursty", None),
            "VR3": ("late", 20.0), "VR4": ("late", 7.0)}


def paper_scenario(models: dict, *, delta: float, rsf: float = 0.5, c_max: float = 30.0,
                   profile: str = "fixed", late_by: float | None = None, units: int = 4500, rate: float = 1.0,
                   n_queries: int | None = None, seed: int = 7, slots: int = 1) -> Scenario:
    """One run of the protocol: ``n_queries`` (default: each model once) sampled from ``models``."""
    rng = random.Random(seed)
    pool = models["queries"]
    picked = list(pool) if n_queries is None else [rng.choice(pool) for _ in range(n_queries)]
    rng.shuffle(picked)  # the first query, and the stagger order, are random
    window_end = units / rate
    fixed = {"kind": "empirical", "times": arrival_offsets("fixed", rate, units)}
    actual = None
    if profile != "fixed":
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}", "profile")
        actual = {"kind": "empirical", "times": arrival_offsets(profile, rate, units, late_by=late_by)}
    queries, deadline = [], None
    for i, m in enumerate(picked):
        single = cost_model_from_dict(m["cost"]).cost(units)
        deadline = (window_end + delta * single + c_max) if deadline is None else deadline + delta * single
        q = {"id": f"{m['id']}#{i}" if n_queries is not None else m["id"], "submit_at": 0.0,
             "window_start": 0.0, "window_end": window_end, "deadline": deadline,
             "arrival": fixed, "cost": m["cost"], "final_agg": m.get("final_agg")}
        if actual is not None:
            q["actual_arrival"] = actual
        queries.append(q)
    return Scenario.from_dict({"queries": queries, "slots": slots, "rsf": rsf, "c_max": c_max})
