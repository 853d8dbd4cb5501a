"""Planning: scenario building (scenario.py), batch and checkpointing search (search.py), ranking and
reasons (recommend.py), and orchestration (planner.py: evaluate, plan, sweep). Imports only downward."""
