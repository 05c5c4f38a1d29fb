"""Results and reports: what a run leaves on the controller, read back and summarised.

The results layout (``layout``, ``provenance``), PerfLog parsing (``perflog``), a round's
result and pass rule (``rounds``, ``stats``, ``mfu``, ``monitoring``), the run's summary and
reports (``summary``, ``overview``, ``report``), comparisons (``compare``) and FlagPerf's own
results folders (``flagperf_import``). Imports ``config`` only.
"""
