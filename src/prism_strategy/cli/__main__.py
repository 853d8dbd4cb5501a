"""`python -m prism_strategy.cli` (what emit's commbench.pbs / .sbatch run on every rank)."""

from prism_strategy.cli import main

main()
