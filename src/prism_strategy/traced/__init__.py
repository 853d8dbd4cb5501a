"""Traced estimates: the real model and the real wrap() run on fake tensors (and a fake process
group for FSDP2), measured by torch's MemTracker. Above runtime/ and estimate/: it applies the
strategy for real, so estimate/ (pure formulas) never has to."""
