"""What every layer of harness.app shares: the model folder a run serves (model.py) and signal handling (signals.py)."""
