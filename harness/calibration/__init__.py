"""Calibration: timing an engine on fixed requests (``timing``) and the calibration record,
its identity, file format and reader (``record``). Calibrating a sweep's engines:
``harness.sweep.calibrate``."""
