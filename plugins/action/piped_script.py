"""Run host-side Python on a host in one ssh exchange, piped to the host's interpreter.

``ansible.builtin.script`` costs about five ssh exchanges per host (make a temporary folder,
transfer, chmod, run, remove); this action costs one: the host's Python with the program on
standard input (a script's text, or a runner with the host package's archive), so nothing is
written on the host's disk. On 32 loopback hosts sharing 2 cores, a task running a small Python
script took 1.1-1.3 s this way, against 2.7-2.9 s with ``script`` and 6.1-6.4 s with a
``command`` module run. A step that starts background processes must detach them from the
session's standard streams (the exchange ends when every copy of them is closed).

Options:

* ``module``: an entry module of the host package (``flagperf_host.node_job``), run as
  ``python3 -m`` runs it, from the package's archive sent with the task (it is held in memory on
  the host: nothing installed there first, nothing left; ``flagperf_ansible.run.host_steps``).
  Our roles' steps are such modules, so a role runs its step alone or with other roles' steps
  in one task (a round);
* ``script`` (instead of ``module``): a file, looked up as ``ansible.builtin.script`` looks up
  its own (the role's ``files/``, then the playbook's);
* ``argv`` (list, default ``[]``): the script's arguments, each passed as one word whatever
  it contains (quoted here; never split or expanded by the host's shell);
* ``steps`` (list, instead of ``module``, ``script`` and ``argv``): several steps in the same
  exchange, each a mapping of ``module`` or ``script``, ``argv`` and ``environment`` (a mapping
  added to the task's for that step only); run one after the other in one interpreter, each in
  a fresh ``__main__`` module as if it were run alone (``sys.argv``, ``os.environ``; standard input is
  the null device), stopping at the first that exits non-zero (its ``rc`` is the task's, and a
  line on ``stderr`` names it, as does the task's ``msg``). A step's script must not leave
  state that matters to the next (signal handlers, threads, the working folder), and a process
  it forks must end by ``os._exit`` (as a daemon's parent does) rather than return; a process
  it leaves running has the runner's command line, which lists every step's script name and
  words (``python3 -c <runner> flagperf_host.sys_monitor start ... flagperf_host.node_job start
  ...``). A round on
  many hosts starts a node's monitor and case and waits its first slice this way: one task and
  one interpreter per host instead of three of each;
* a step's ``input_module`` (a mapping of ``name`` and ``args``): the step's standard input is
  that Ansible module's payload with those arguments, built as Ansible builds it for a pipelined
  run (an AnsiballZ Python program, which ``python3 -`` runs: prints the module's result as one
  JSON line), instead of the null device. On the host it is an unnamed temporary file (no path,
  gone when closed). A step that starts the module in the background hands it on
  (``flagperf_host.node_job start --input``), so that a module that runs long (a container) needs no Ansible async job:
  that is four more ssh exchanges per host (a temporary folder, two transfers, their modes) and
  a second module run (``async_wrapper``) to start, and a results file left in
  ``~/.ansible_async``. The arguments are templated with the task (``omit`` drops a key);
* a step's ``input`` (a string, or data sent as JSON; instead of ``input_module``): the step's
  standard input is that text (e.g. a document too long for one word of a command line), in an
  unnamed temporary file as a module's payload is;
* ``keep_going`` (bool, default false): run the later steps after a failed one too (steps
  that stop things); the task's ``rc`` is still the first failed step's;
* ``executable`` (default ``python3``): the Python on the host.

The task's ``environment`` and ``become`` apply as they do to modules. Returns ``rc``,
``stdout``, ``stderr`` (and their ``_lines``); ``failed`` when ``rc`` is not 0 (use
``failed_when`` to keep a result instead), ``changed`` true unless ``changed_when`` says
otherwise. In check mode it runs nothing and returns ``skipped``. Needs a connection that can
pipe data to a command (ssh, local, docker; not winrm).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

try:
    import flagperf_ansible  # noqa: F401
except ImportError:  # running from a checkout without `pip install`: src/ beside plugins/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from flagperf_ansible.run.host_steps import HOST_PACKAGE, Step, exchange, is_entry_module

STEP_KEYS = frozenset(("module", "script", "argv", "environment", "input", "input_module"))

# The runner's line for a failed step (a step's own stderr may have lines much like it).
_FAILED_STEP = re.compile(r"step \d+ \(.+\) exited \d+")


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("module", "script", "argv", "steps", "keep_going", "executable"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        if ("steps" in args) == bool(args.get("script") or args.get("module")):
            raise AnsibleActionFail("give either module or script (with argv), or steps")
        steps = args["steps"] if "steps" in args else [{"module": args.get("module"), "script": args.get("script"),
                                                         "argv": args.get("argv")}]
        if not isinstance(steps, list) or not steps:
            raise AnsibleActionFail("steps must be a non-empty list")
        steps = [self._check_step(f"steps[{number}]." if "steps" in args else "", step)
                 for number, step in enumerate(steps, 1)]
        executable = to_text(args.get("executable") or "python3")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing run")
            return result
        runs = []
        for step in steps:
            source = b""
            if step["script"]:
                with open(self._find_needle("files", step["script"]), "rb") as handle:
                    source = handle.read()
            runs.append(Step(argv=step["argv"], module=step["module"], script=step["script"], source=source,
                             env=step["environment"],
                             input=self._module_payload(step["input_module"], task_vars) if step["input_module"]
                             else step["input"].encode("utf-8")))
        if "steps" not in args and not runs[0].module:
            # A script alone: its text is the program (``python3 - ARGV``), no runner.
            command, data = " ".join(shlex.quote(w) for w in [executable, "-", *runs[0].argv]), runs[0].source
        else:
            command, data = exchange(executable, runs, keep_going=boolean(args.get("keep_going", False)))
        environment = self._compute_environment_string()
        if environment:
            command = f"{environment} {command}"
        done = self._low_level_execute_command(command, in_data=data, sudoable=True)
        result.update(done, changed=True)
        if done["rc"] != 0:
            lines = to_text(done["stderr"]).strip().splitlines() if "steps" in args else []
            said = [line for line in lines if _FAILED_STEP.fullmatch(line)]
            result.update(failed=True, msg=said[0] if said else f"{runs[0].name} exited {done['rc']}")
        return result

    def _module_payload(self, wanted, task_vars):
        """The payload of module ``wanted["name"]`` with ``wanted["args"]``, as ``_execute_module``
        builds it for a pipelined run (Ansible's internal arguments added)."""
        arguments = dict(wanted["args"])
        self._update_module_args(wanted["name"], arguments, task_vars)
        bits, _ = self._configure_module(module_name=wanted["name"], module_args=arguments,
                                         task_vars=task_vars)
        if bits.module_style != "new":
            raise AnsibleActionFail(f"input_module: {wanted['name']} is not an AnsiballZ module")
        return bits.b_module_data

    @staticmethod
    def _check_step(where, step):
        """A step's module or script, argv, environment and input module; ``where`` prefixes
        the messages."""
        if not isinstance(step, dict) or set(step) - STEP_KEYS or bool(step.get("module")) == bool(step.get("script")):
            raise AnsibleActionFail(f"{where.rstrip('.')} must be a mapping of module or script, argv, "
                                    "environment, input or input_module")
        module = to_text(step.get("module") or "")
        if module and not is_entry_module(module):
            raise AnsibleActionFail(f"{where}module must be a module of {HOST_PACKAGE}, got {module!r}")
        argv = step.get("argv") or []
        if not isinstance(argv, list):
            raise AnsibleActionFail(f"{where}argv must be a list, got {type(argv).__name__}")
        environment = step.get("environment") or {}
        if not isinstance(environment, dict):
            raise AnsibleActionFail(f"{where}environment must be a mapping")
        wanted = step.get("input_module")
        if wanted is not None and not (isinstance(wanted, dict) and set(wanted) <= {"name", "args"}
                                       and isinstance(wanted.get("name"), str)
                                       and isinstance(wanted.get("args", {}), dict)):
            raise AnsibleActionFail(f"{where}input_module must be a mapping of name and args (a mapping)")
        text = step.get("input")
        if text is not None and wanted is not None:
            raise AnsibleActionFail(f"{where}input and input_module exclude each other")
        if isinstance(text, (Mapping, list)):
            text = json.dumps(text)
        elif text is not None and not isinstance(text, str):
            raise AnsibleActionFail(f"{where}input must be a string, or data sent as JSON")
        return {"input": to_text(text or ""), "module": module, "script": to_text(step.get("script") or ""),
                "argv": [to_text(word) for word in argv],
                "environment": {to_text(k): to_text(v) for k, v in environment.items()},
                "input_module": {"name": wanted["name"], "args": wanted.get("args") or {}} if wanted else None}
