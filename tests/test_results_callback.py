"""The results callback's hold on Ctrl-C: an interrupt that Ansible's handler raised but the
interpreter dropped (raised inside a fork hook, it is printed as "Exception ignored" and the run
goes on) still stops the run at the next task."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "plugins/callback/flagperf_results.py"

# In a process of its own: ansible-core's TaskQueueManager, as ansible-playbook makes it before
# any callback starts, installs its SIGINT and SIGTERM handler (and marks the standard streams
# not inheritable, which pytest's process must not get). Then the callback takes the signals,
# one comes, and its KeyboardInterrupt is dropped.
DROPPED = r"""
import importlib.util, json, os, signal, sys
from ansible.executor.task_queue_manager import TaskQueueManager
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.task import Task
from ansible.plugins.loader import init_plugin_loader
from ansible.vars.manager import VariableManager

init_plugin_loader()
loader = DataLoader()
inventory = InventoryManager(loader=loader, sources=[])
TaskQueueManager(inventory=inventory, loader=loader, passwords={},
                 variable_manager=VariableManager(loader=loader, inventory=inventory))
spec = importlib.util.spec_from_file_location("flagperf_results", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
callback = module.CallbackModule()
callback._take_signals()


def task_start():
    try:
        callback.v2_playbook_on_task_start(Task(), False)
        return "ran"
    except KeyboardInterrupt:
        return "interrupted"


seen = [task_start()]
try:
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
except KeyboardInterrupt:
    seen.append("raised, dropped")
seen.append("next Ctrl-C kills" if signal.getsignal(signal.SIGINT) is signal.SIG_DFL else "?")
seen.append(task_start())
print(json.dumps(seen))
"""


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_an_interrupt_the_interpreter_dropped_stops_the_next_task(signame):
    done = subprocess.run([sys.executable, "-c", DROPPED, str(PLUGIN), signame],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "ran", "raised, dropped", "next Ctrl-C kills", "interrupted"], done.stderr[-3000:]


@pytest.fixture
def signals():
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def test_without_ansibles_handler_the_signals_are_left_alone(signals):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    spec = importlib.util.spec_from_file_location("flagperf_test_results_callback", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.CallbackModule()._take_signals()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
