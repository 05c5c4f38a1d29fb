"""Orchestration: the plan of a run and its steps through the playbooks.

``plan`` lays out the rounds once from validated configuration; ``runner`` (the wrapper) runs
the playbooks through ansible-runner one step at a time; ``launch`` names images, environments
and containers; ``round_wait`` reads how a round's nodes ended; ``base_image`` builds the base
image; ``host_archive`` packs the host-side package (``flagperf_host``) that the steps run.
Imports ``config`` and ``results``; nothing imports it but the command line and the plugins.
"""
