"""The PyTorch side of the driver: the trainer every PyTorch training case runs on
(``trainer``) and the vendors' hooks into it (``vendor_hooks``). Imports torch; the driver's
core (PerfLog, RoundClock, case I/O, convergence, dist) does not."""
