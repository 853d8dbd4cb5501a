"""Measurement: real runs beside the planner's predictions, stored, and fitted back into the model.

Rooms, each importing only the ones below it: `collectives/` above `launch/` above `fit/`
above `results/`; `importers/` reads logs measured elsewhere into `results/`.
"""
