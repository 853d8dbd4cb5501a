"""Planning: ranking and reasons (recommend.py), and orchestration (planner.py: evaluate, plan,
sweep); the batch and checkpointing searches are estimate/'s (batch.py, ckpt_search.py). Imports only
downward."""
