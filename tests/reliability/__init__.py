"""Reliability attacks (issue 6): process death, torn files, storage faults, concurrency, isolation
and secrets. `model` and `procs` are shared with the long campaign in `bench/reliability.py`."""
