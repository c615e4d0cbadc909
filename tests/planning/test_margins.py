"""Safety margins learned from measured batches (airflow_iqp.planning.margins)."""

import random

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.margins import MIN_SAMPLES, SCALE_BOUNDS, Margins, learn_margins


def deployment(n, scale, dispatch, seed=7, jitter=0.05):
    """Batches of a deployment that adds ``dispatch`` seconds to each and runs ``scale``
    times slower than the model, with some noise."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        modelled = rnd.uniform(0.5, 20.0)
        out.append((modelled, (scale * modelled + dispatch) * rnd.uniform(1 - jitter, 1 + jitter)))
    return out


def test_margins_cover_the_quantile_of_batches_at_the_least_planned_total():
    samples = deployment(200, 1.6, 2.0)
    m = learn_margins(samples)
    assert m.samples == 200 and m.covered >= 0.9
    covered = sum(m.scale * mod + m.dispatch >= took - 1e-9 for mod, took in samples) / len(samples)
    assert covered == pytest.approx(m.covered, abs=1e-3)
    # Near the deployment's own factor and fixed cost, and cheaper than either alone.
    assert 1.5 <= m.scale <= 1.8 and 0.5 <= m.dispatch <= 3.5
    only_scale = learn_margins(samples, dispatch=0.0)
    only_dispatch = learn_margins(samples, scale=1.0)
    total = lambda x: sum(x.scale * mod + x.dispatch for mod, _t in samples)  # noqa: E731
    assert total(m) <= total(only_scale) and total(m) <= total(only_dispatch)
    assert only_scale.covered >= 0.9 and only_dispatch.covered >= 0.9
    assert only_scale.dispatch == 0.0 and only_dispatch.scale == 1.0


def test_a_deployment_as_fast_as_its_model_learns_no_margin():
    samples = [(m, 0.8 * m) for m, _t in deployment(50, 1.0, 0.0)]
    m = learn_margins(samples)
    assert (m.scale, m.dispatch, m.covered) == (SCALE_BOUNDS[0], 0.0, 1.0)


def test_too_few_batches_keep_the_defaults_and_a_runaway_scale_is_bounded():
    few = deployment(MIN_SAMPLES - 1, 3.0, 5.0)
    default = Margins(scale=1.25, dispatch=1.0)
    assert learn_margins(few, default=default) == default
    assert learn_margins(few, default=default, dispatch=0.0) == Margins(scale=1.25, dispatch=0.0)
    wild = learn_margins([(1.0, 100.0)] * 10, dispatch=0.0)
    assert wild.scale == SCALE_BOUNDS[1] and wild.covered == 0.0
    with pytest.raises(ConfigError, match="quantile"):
        learn_margins(few, quantile=1.5)
