"""Collectives: what each strategy's real engine issues in one optimizer step (census.py, recorded
inside each rank by launch/census_record.py) against the engine model, and what those collectives cost on
the real backend at the launched scale (commbench.py, one rank's replay in commbench_worker.py)."""
