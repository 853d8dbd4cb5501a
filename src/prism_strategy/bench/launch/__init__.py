"""Launching: the bench / ceiling / tune runs from the CLI's values (requests.py, run.py), each a real
torchrun launch (harness.py) of the worker that runs one rank (worker.py), with where and with what
it ran (fingerprint.py) and, in census mode, the step's collectives recorded inside the rank
(census_record.py); the outcomes become stored results beside the prediction."""
