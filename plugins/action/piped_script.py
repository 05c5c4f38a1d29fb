"""Run a controller-side script on the host by piping it to the host's interpreter.

``ansible.builtin.script`` costs about five ssh exchanges per host (make a temporary folder,
transfer, chmod, run, remove); this action costs one: ``<executable> - ARGV...`` with the
script's text on standard input, so nothing is written on the host. On 32 loopback hosts
sharing 2 cores, a task running a small Python script took 1.1-1.3 s this way, against
2.7-2.9 s with ``script`` and 6.1-6.4 s with a ``command`` module run. For Python (an
interpreter that reads its program from standard input when given ``-`` as the program). A script that starts background processes must detach
them from the session's standard streams (the exchange ends when every copy of them is closed).

Options:

* ``script``: the file, looked up as ``ansible.builtin.script`` looks up its own (the role's
  ``files/``, then the playbook's);
* ``argv`` (list, default ``[]``): the script's arguments, each passed as one word whatever
  it contains (quoted here; never split or expanded by the host's shell);
* ``steps`` (list, instead of ``script`` and ``argv``): several scripts in the same exchange,
  each a mapping of ``script``, ``argv`` and ``environment`` (a mapping added to the task's
  for that step only); run one after the other, each by its own interpreter process as if it
  were alone, stopping at the first that exits non-zero (its ``rc`` is the task's, and a line
  on ``stderr`` names it, as does the task's ``msg``). A round on many hosts starts a node's
  monitor and case and waits its first slice this way: one task per host instead of three;
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
import shlex

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

STEP_KEYS = frozenset(("script", "argv", "environment"))

# Runs the steps on the host (Python 3.6 or later): each script by a child interpreter reading
# it from standard input, with the step's environment over the task's; the first non-zero
# exit ends the run with that status (128 + N for a signal), unless keep_going.
STEPS_RUNNER = """\
import json, os, subprocess, sys
run = json.loads(sys.stdin.buffer.readline())
status = 0
for number, step in enumerate(run["steps"], 1):
    source = sys.stdin.buffer.read(step["size"])
    sys.stdout.flush()
    rc = subprocess.run([sys.executable, "-"] + step["argv"], input=source,
                        env=dict(os.environ, **step["env"])).returncode
    if rc != 0:
        sys.stderr.write("step %d (%s) exited %d\\n" % (number, step["name"], rc))
        status = status or (rc if rc > 0 else 128 - rc)
        if not run["keep_going"]:
            break
sys.exit(status)
"""


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("script", "argv", "steps", "keep_going", "executable"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        if ("steps" in args) == bool(args.get("script")):
            raise AnsibleActionFail("give either script (with argv) or steps")
        steps = args["steps"] if "steps" in args else [{"script": args["script"],
                                                         "argv": args.get("argv")}]
        if not isinstance(steps, list) or not steps:
            raise AnsibleActionFail("steps must be a non-empty list")
        steps = [self._check_step(f"steps[{number}]." if "steps" in args else "", step)
                 for number, step in enumerate(steps, 1)]
        executable = to_text(args.get("executable") or "python3")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing run")
            return result
        sources = []
        for step in steps:
            with open(self._find_needle("files", step["script"]), "rb") as handle:
                sources.append(handle.read())
        if "steps" in args:
            # The runner reads a header line, then each script's bytes, from standard input.
            header = {"keep_going": boolean(args.get("keep_going", False)),
                      "steps": [{"name": step["script"], "argv": step["argv"],
                                 "env": step["environment"], "size": len(source)}
                                for step, source in zip(steps, sources)]}
            words = [executable, "-c", STEPS_RUNNER]
            data = to_bytes(json.dumps(header)) + b"\n" + b"".join(sources)
        else:
            words = [executable, "-", *steps[0]["argv"]]
            data = sources[0]
        command = " ".join(shlex.quote(word) for word in words)
        environment = self._compute_environment_string()
        if environment:
            command = f"{environment} {command}"
        done = self._low_level_execute_command(command, in_data=data, sudoable=True)
        result.update(done, changed=True)
        if done["rc"] != 0:
            lines = to_text(done["stderr"]).strip().splitlines() if "steps" in args else []
            said = [line for line in lines if line.startswith("step ")]
            result.update(failed=True, msg=said[0] if said else f"{steps[0]['script']} exited {done['rc']}")
        return result

    @staticmethod
    def _check_step(where, step):
        """A step's script, argv and environment as text; ``where`` prefixes the messages."""
        if not isinstance(step, dict) or not step.get("script") or set(step) - STEP_KEYS:
            raise AnsibleActionFail(f"{where.rstrip('.')} must be a mapping of script, argv, environment")
        argv = step.get("argv") or []
        if not isinstance(argv, list):
            raise AnsibleActionFail(f"{where}argv must be a list, got {type(argv).__name__}")
        environment = step.get("environment") or {}
        if not isinstance(environment, dict):
            raise AnsibleActionFail(f"{where}environment must be a mapping")
        return {"script": to_text(step["script"]), "argv": [to_text(word) for word in argv],
                "environment": {to_text(k): to_text(v) for k, v in environment.items()}}
