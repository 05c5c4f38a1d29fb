"""Helpers every standard case uses inside the container: PerfLog, distributed setup, config,
per-rank output and the FINISHED figures. Imports nothing from the controller package."""
