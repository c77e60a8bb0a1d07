"""From stored runs to figures, tables and REPORT.md; the analytical model and its simulator.

Entry points: ``python -m reports`` (:mod:`reports.report`) and
``python -m reports.simulation_report``. Reads only what the harness writes under
``results/<sweep>/<job>/``.
"""
