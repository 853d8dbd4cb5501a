"""Fitting and tuning: the model meets the measurements. Published records shipped as data
(published.py); platform factors and step-time terms fitted to them and to stored results
(calibrate.py, fit_terms.py, cuda_fit.py); and the searches that let predictions choose what to
measure next (tune.py, ceiling.py)."""
