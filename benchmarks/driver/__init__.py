"""Helpers every standard case uses inside the container: PerfLog, distributed setup, config,
per-rank output, the FINISHED figures and the convergence target. Imports nothing from the
controller package, and no framework: the PyTorch trainer lives in ``driver.torch``."""
