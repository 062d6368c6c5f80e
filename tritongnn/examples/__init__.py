"""Runnable examples; ``tritongnn-train`` is ``examples.train.main``."""
