"""Every window of a fixed set is planned as it was when ``fixed_plans.json`` was recorded
(``tests/window/plans.py``): a change of structure changes no plan."""

import json

from tests.window.plans import RECORD, plans


def test_the_fixed_windows_are_planned_as_recorded():
    recorded = json.loads(RECORD.read_text())
    now = plans()
    assert sorted(now) == sorted(recorded)
    changed = {k: {"was": recorded[k], "now": now[k]} for k in recorded if now[k] != recorded[k]}
    assert changed == {}, f"{len(changed)} of {len(recorded)} plans changed, e.g. {next(iter(changed.items()))}"
