"""Results: the SQLite store of measured runs (store.py) and measured collective curves (curves.py),
the planner's prediction for a stored configuration (predict.py), and prediction beside measurement
for every stored row (compare.py)."""
