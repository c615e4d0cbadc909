"""Arrival profiles of input units, after the paper's figure 9 (fixed and variable rates).

Pure Python (no Spark, no Airflow): the replay command, the Airflow layer and the
simulator all use :func:`arrival_offsets`.

Every profile is defined over the window ``[0, T]`` with ``T = window`` (default
``units / rate``); ``x_i = (i + 1) / units`` is the fraction of the input delivered once
unit ``i`` has landed, and the fixed profile lands unit ``i`` at ``T * x_i``.

========  ==================================================================================
fixed     constant rate: ``t_i = T * x_i``; the last unit lands at the window end.
faster    constant but faster (the paper's VR1): everything lands by ``0.75 T``.
bursty    faster, in bursts (VR2): units come in ~10 bursts; all units of a burst land
          together, when the faster profile would deliver the burst's first unit.
slower    behind the fixed rate through the window, catching up at the end (``t_n = T``):
          ``t = T * (x + 0.6 x^2 (1 - x))``, the lag is largest at two thirds of the window.
late      like ``slower``, but the last 10 % of the units drift late, the last one landing
          ``0.05 T`` after the window end (the paper's VR3/VR4, last tuples 20 s and 7 s late).
stalled   fixed rate until half the window, then nothing until ``0.75 T``; the backlog lands
          at ``0.75 T`` in one go and the fixed rate resumes; the last unit lands at ``T``.
========  ==================================================================================
"""

from __future__ import annotations

import math

from airflow_iqp.errors import ConfigError

PROFILES = ("fixed", "faster", "bursty", "slower", "late", "stalled")
FASTER = 0.75          # faster profiles deliver everything by FASTER * T
BURSTS = 10            # bursty: number of bursts
SLOW_LAG = 0.6         # slower: amplitude of the lag term
LATE_FRACTION = 0.05   # late: the last unit lands LATE_FRACTION * T after the window end
LATE_TAIL = 0.10       # late: the fraction of units (at the end) that drift late
STALL_FROM, STALL_TO = 0.5, 0.75


def _slower(x: float) -> float:
    return x + SLOW_LAG * x * x * (1.0 - x)


def arrival_offsets(profile: str, rate: float, units: int, window: float | None = None,
                    late_by: float | None = None) -> list[float]:
    """Seconds after the window start at which units ``0 .. units-1`` land, for a profile.

    ``rate`` is the fixed reference rate in units per second; ``window`` the window length
    in seconds (default ``units / rate``). ``late_by`` is how many seconds after the window
    end the ``late`` profile's last unit lands (default ``LATE_FRACTION * window``; the
    paper's VR3 and VR4 are 20 s and 7 s late on a 4500 s window). The result is non-decreasing. Raises
    :class:`ConfigError` for an unknown profile or a non-positive rate, count or window.
    """
    name = str(profile).lower()
    if name not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}", field="profile")
    if not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"must be a positive number of units per second, got {rate!r}", field="rate")
    if int(units) != units or units < 0:
        raise ConfigError(f"must be an integer >= 0, got {units!r}", field="units")
    units = int(units)
    T = units / rate if window is None else float(window)
    if units and not T > 0:
        raise ConfigError(f"must be > 0 seconds, got {window!r}", field="window")
    xs = [(i + 1) / units for i in range(units)]
    if name == "fixed":
        out = [T * x for x in xs]
    elif name == "faster":
        out = [FASTER * T * x for x in xs]
    elif name == "bursty":
        size = max(1, math.ceil(units / BURSTS))
        out = [FASTER * T * ((i // size) * size + 1) / units for i in range(units)]
    elif name == "slower":
        out = [T * _slower(x) for x in xs]
    elif name == "late":
        tail_start = 1.0 - LATE_TAIL
        late = LATE_FRACTION * T if late_by is None else float(late_by)
        if late < 0:
            raise ConfigError(f"must be >= 0 seconds, got {late_by!r}", field="late_by")
        out = [T * _slower(x) + late * max(0.0, (x - tail_start) / LATE_TAIL) for x in xs]
    else:  # stalled
        out = [T * (STALL_TO if STALL_FROM < x <= STALL_TO else x) for x in xs]
    return out
