"""Settings of a run: the model, its command-line declarations and checks."""
