"""Timetables of airflow-iqp."""
