"""A job and a sweep of them: the runner, a job end to end, the multirun plan, plan mode and
the calibration of a sweep's engines."""
