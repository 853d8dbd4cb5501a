"""Pure step-series analysis (detection, stragglers): used by runtime's monitor, diagnose and report."""
