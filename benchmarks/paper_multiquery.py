"""The paper's multi-query protocol (section 7.4) in the simulator: figures 7, 8, 10 and 11.

    python benchmarks/paper_multiquery.py [--json] [--models benchmarks/scenarios/paper_queries.json]
    python benchmarks/paper_multiquery.py --calibration COST_HISTORY --calibrated-units 300 [--backend spark-connect]

Twelve queries (the catalogue's CQ1-CQ4 and TPC-H Q1, Q3, Q4, Q6, Q10, Q12, Q14, Q19),
4500 units at 1 unit/s, one slot, Cmax 30 s, deadlines staggered as the paper does:

* figure 7: delta in {1, 0.8, 0.6, 0.4, 0.2, 0.1}, rsf 50 %, fixed rate, every policy;
* figure 8: the same without MinBatch (whatever has arrived), EDF and LLF;
* figure 10: delta 0.1, rsf 100 %, the fixed rate and the variable profiles of figure 9
  (VR3 and VR4 slower, their last units 20 s and 7 s late, as in the paper);
* figure 11: delta 0.2, rsf 50 %, the same profiles;
* scale: 100 queries sampled from the twelve models over the 4500 s window (goal < 5 s).

With ``--calibration`` the queries' models are this project's own calibrations (the
newest fit of each query on ``--backend`` in that cost history, as ``vs_streaming.py``'s
preparation writes it), stretched to the protocol's 4500 units
(:func:`benchmarks.paper.models_from_calibration`); they are written to
``benchmarks/scenarios/<backend>_calibrated.json`` and the results to
``paper_multiquery_<backend>.*``.

With --json prints a list of rows {"policy", "minbatch", "rsf", "delta", "profile",
"queries", "deadlines_met", "normalized_cost", "batches"}. Always writes
benchmarks/results/paper_multiquery.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_iqp.planning.simulate import simulate  # noqa: E402
from benchmarks.paper import DELTAS, FIGURE_9, load_models, models_from_calibration, paper_scenario  # noqa: E402

HERE = Path(__file__).parent
MODELS = HERE / "scenarios" / "paper_queries.json"
RESULTS = HERE / "results"
POLICIES = ("llf", "edf", "sjf", "rr")


def row(result, *, rsf, delta, profile, figure):
    return {"figure": figure, "policy": result.policy, "minbatch": result.minbatch, "rsf": rsf, "delta": delta,
            "profile": profile, **{k: v for k, v in result.summary().items() if k not in ("policy", "minbatch")}}


def run_all(models) -> tuple[list[dict], dict]:
    rows = []
    for delta in DELTAS:  # figure 7
        sc = paper_scenario(models, delta=delta, rsf=0.5)
        rows += [row(simulate(sc, p), rsf=0.5, delta=delta, profile="fixed", figure=7) for p in POLICIES]
    for delta in DELTAS:  # figure 8
        sc = paper_scenario(models, delta=delta, rsf=0.5)
        rows += [row(simulate(sc, p, minbatch=False), rsf=0.5, delta=delta, profile="fixed", figure=8)
                 for p in ("edf", "llf")]
    for figure, delta, rsf in ((10, 0.1, 1.0), (11, 0.2, 0.5)):
        for name, (profile, late_by) in FIGURE_9.items():
            sc = paper_scenario(models, delta=delta, rsf=rsf, profile=profile, late_by=late_by)
            rows += [row(simulate(sc, p), rsf=rsf, delta=delta, profile=name, figure=figure) for p in POLICIES]
    sc = paper_scenario(models, delta=1.0, rsf=0.5, n_queries=100, seed=11)
    t0 = time.perf_counter()
    big = simulate(sc, "llf")
    scale = {"queries": 100, "seconds": time.perf_counter() - t0, "goal_seconds": 5.0,
             **{k: v for k, v in big.summary().items() if k != "queries"}}
    return rows, scale


def table(rows, scale, n: int = 12) -> str:
    out = []
    fig7 = [r for r in rows if r["figure"] == 7]
    out.append(f"Figure 7 (rsf 50 %, fixed rate): deadlines met of {n}, normalised cost\n")
    out.append("| delta | " + " | ".join(p.upper() for p in POLICIES) + " |")
    out.append("|---|" + "---|" * len(POLICIES))
    for d in DELTAS:
        cells = [next(r for r in fig7 if r["delta"] == d and r["policy"] == p) for p in POLICIES]
        out.append(f"| {d}D | " + " | ".join(f"{c['deadlines_met']}/{n}, {c['normalized_cost']:.2f}" for c in cells)
                   + " |")
    fig8 = [r for r in rows if r["figure"] == 8]
    out.append("\nFigure 8 (no MinBatch, whatever has arrived): deadlines met, normalised cost, batches\n")
    out.append("| delta | EDF | LLF | cost vs MinBatch (EDF) |")
    out.append("|---|---|---|---:|")
    for d in DELTAS:
        e = next(r for r in fig8 if r["delta"] == d and r["policy"] == "edf")
        l8 = next(r for r in fig8 if r["delta"] == d and r["policy"] == "llf")
        m = next(r for r in fig7 if r["delta"] == d and r["policy"] == "edf")
        out.append(f"| {d}D | {e['deadlines_met']}/{n}, {e['normalized_cost']:.2f}, {e['batches']} | "
                   f"{l8['deadlines_met']}/{n}, {l8['normalized_cost']:.2f}, {l8['batches']} | "
                   f"{e['normalized_cost'] / m['normalized_cost']:.1f}x |")
    for figure, title in ((10, "Figure 10 (0.1D, rsf 100 %)"), (11, "Figure 11 (0.2D, rsf 50 %)")):
        fr = [r for r in rows if r["figure"] == figure]
        out.append(f"\n{title}: deadlines met of {n}, normalised cost, batches\n")
        out.append("| profile | " + " | ".join(p.upper() for p in POLICIES) + " |")
        out.append("|---|" + "---|" * len(POLICIES))
        for name, (profile, late_by) in FIGURE_9.items():
            cells = [next(r for r in fr if r["profile"] == name and r["policy"] == p) for p in POLICIES]
            late = f", last unit {late_by:g} s late" if late_by else ""
            out.append(f"| {name} ({profile}{late}) | " + " | ".join(
                f"{c['deadlines_met']}/{n}, {c['normalized_cost']:.2f}, {c['batches']}" for c in cells) + " |")
    out.append(f"\nScale: {scale['queries']} queries sampled from the {n} models, LLF, simulated in "
               f"{scale['seconds']:.2f} s (goal < {scale['goal_seconds']:.0f} s); {scale['deadlines_met']} "
               f"deadlines met, normalised cost {scale['normalized_cost']:.2f}, {scale['batches']} batches.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--models", type=Path, default=MODELS)
    ap.add_argument("--calibration", type=Path, help="a cost history with airflow-iqp calibrate's fits")
    ap.add_argument("--calibrated-units", type=int, help="the units of the calibrated window")
    ap.add_argument("--backend", default="spark-connect", help="whose fits (default spark-connect)")
    args = ap.parse_args(argv)
    stem, source = "paper_multiquery", args.models
    if args.calibration:
        if not args.calibrated_units:
            ap.error("--calibration needs --calibrated-units")
        models = models_from_calibration(args.calibration, args.backend, args.calibrated_units)
        source = HERE / "scenarios" / f"{args.backend.replace('-', '_')}_calibrated.json"
        source.write_text(json.dumps(models, indent=1) + "\n")
        stem = f"paper_multiquery_{args.backend.replace('-', '_')}"
    else:
        models = load_models(args.models)
    rows, scale = run_all(models)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"models": str(source), "rows": rows, "scale": scale},
                                                     indent=1) + "\n")
    text = table(rows, scale, len(models["queries"]))
    (RESULTS / f"{stem}.md").write_text(text)
    if args.json:
        keys = ("policy", "minbatch", "rsf", "delta", "profile", "queries", "deadlines_met", "normalized_cost",
                "batches")
        print(json.dumps([{k: r[k] for k in keys} for r in rows], indent=1))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
