"""Loads the filter and test plugins in ansible-playbook's main process when a play starts.

ansible-core forks a worker process for every task and host, and loads a plugin on its first
use in a process. The main process templates almost nothing itself, so without this every
worker, even one that only skips its task, imports the filter and test plugins again (here:
ansible.builtin's filters and tests, and ``plugins/filter/flagperf.py`` with the
flagperf_ansible modules it imports). Loaded once before the workers fork, they are inherited.
Measured on 32 loopback hosts (a round of runtime none of ``bench/round_overhead.py``'s case):
about 1.5 s less controller CPU per round, some 10 ms per task and host.
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = """
name: flagperf_preload
type: aggregate
short_description: load the filter and test plugins before the workers fork
description: At each play's start, loads every filter and test plugin on the configured
  paths, and this collection's filters, in the main process, so that the forked workers
  inherit them instead of importing them again for each task and host.
requirements:
  - enable in ansible.cfg (callbacks_enabled = flagperf_preload)
"""

# One of this collection's filters: loading it loads their file (plugins/filter/flagperf.py).
COLLECTION_FILTER = "flagperf.benchmark.flagperf_plan"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "flagperf_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play):
        # all() imports each plugin file once (later plays find them loaded); it covers
        # ansible-core's plugins and the configured paths, not collections: this collection's
        # filters are loaded by name (the roles call them so). A plugin that fails to load is
        # left to the task that uses it, which reports it as it always does.
        try:
            for loader in (filter_loader, test_loader):
                for _plugin in loader.all(class_only=True):
                    pass
            filter_loader.get(COLLECTION_FILTER)
        except Exception as err:  # noqa: BLE001 - an optimisation must never stop a run
            self._display.vvv(f"flagperf_preload: {err}")
