"""flagperf-ansible: a vendor-neutral benchmark platform for AI accelerators, driven by Ansible."""

__version__ = "0.1.0"
