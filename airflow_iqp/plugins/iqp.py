"""The airflow-iqp Airflow plugin (registered through the ``airflow.plugins`` entry point).

It registers what Airflow 3.3 only accepts from plugins:

* ``timetables``: :class:`~airflow_iqp.timetables.window.WindowTimetable` (a custom
  timetable is serialized by qualified class name and the scheduler refuses names that
  no plugin registers);
* ``priority_weight_strategies``: EDF/LLF/SJF, usable as
  ``weight_rule="airflow_iqp.priority.EDFPriority"`` (etc.);
* ``deadline_references``: :class:`~airflow_iqp.deadlines.WindowEndDeadline`.

Not listed in ``get_provider_info``: Airflow would load it twice and reject the second.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_iqp.deadlines import WindowEndDeadline
from airflow_iqp.priority import EDFPriority, LLFPriority, SJFPriority
from airflow_iqp.timetables.window import WindowTimetable


class IQPPlugin(AirflowPlugin):
    name = "airflow_iqp"
    timetables = [WindowTimetable]
    priority_weight_strategies = [EDFPriority, LLFPriority, SJFPriority]
    deadline_references = [WindowEndDeadline]
