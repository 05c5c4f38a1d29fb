"""The results callback's hold on Ctrl-C: an interrupt that Ansible's handler raised but the
interpreter dropped (raised inside a fork hook, it is printed as "Exception ignored" and the run
goes on) still stops the run at the next task."""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "plugins/callback/flagperf_results.py"


def load_callback():
    spec = importlib.util.spec_from_file_location("flagperf_test_results_callback", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CallbackModule()


@pytest.fixture
def signals():
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def ansible_handler(signum, _frame):
    """What ansible-core's TaskQueueManager does on SIGINT: the next one kills, this one
    raises."""
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_the_interpreter_dropped_stops_the_next_task(signals, signum):
    signal.signal(signal.SIGINT, ansible_handler)
    callback = load_callback()
    callback._take_signals()
    callback.v2_playbook_on_task_start(None, False)     # no interrupt yet: the run goes on
    try:
        os.kill(os.getpid(), signum)
    except KeyboardInterrupt:
        pass                                           # dropped, as in a fork hook
    with pytest.raises(KeyboardInterrupt):
        callback.v2_playbook_on_task_start(None, False)
    with pytest.raises(KeyboardInterrupt):
        callback.v2_playbook_on_play_start(None)


def test_without_ansibles_handler_the_signals_are_left_alone(signals):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    load_callback()._take_signals()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
