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
  ``files/``, then the playbook's), or with ``role``, in that role of this collection
  (``roles/<role>/files/``): a role's step definition (its ``vars/main.yml``) names its role,
  so the same definition runs from the role's tasks and from a task that combines the steps of
  several roles; or with ``package`` (a Python package's name), in that package's folder as the
  controller imports it (``package: flagperf_ansible``, ``script:
  datasets/layout_check.py``): one file that is both a module and a host script;
* ``argv`` (list, default ``[]``): the script's arguments, each passed as one word whatever
  it contains (quoted here; never split or expanded by the host's shell);
* ``steps`` (list, instead of ``script`` and ``argv``): several scripts in the same exchange,
  each a mapping of ``script``, ``role``, ``argv`` and ``environment`` (a mapping added to the task's
  for that step only); run one after the other in one interpreter, each in a fresh
  ``__main__`` module as if it were run alone (``sys.argv``, ``os.environ``; standard input is
  the null device), stopping at the first that exits non-zero (its ``rc`` is the task's, and a
  line on ``stderr`` names it, as does the task's ``msg``). A step's script must not leave
  state that matters to the next (signal handlers, threads, the working folder), and a process
  it forks must end by ``os._exit`` (as a daemon's parent does) rather than return; a process
  it leaves running has the runner's command line, which lists every step's script name and
  words (``python3 -c <runner> sys_monitor.py start ... node_job.py start ...``). A round on
  many hosts starts a node's monitor and case and waits its first slice this way: one task and
  one interpreter per host instead of three of each;
* a step's ``input_module`` (a mapping of ``name`` and ``args``): the step's standard input is
  that Ansible module's payload with those arguments, built as Ansible builds it for a pipelined
  run (an AnsiballZ Python program, which ``python3 -`` runs: prints the module's result as one
  JSON line), instead of the null device. On the host it is an unnamed temporary file (no path,
  gone when closed). A step that starts the module in the background hands it on (``node_job.py
  start --input``), so that a module that runs long (a container) needs no Ansible async job:
  that is four more ssh exchanges per host (a temporary folder, two transfers, their modes) and
  a second module run (``async_wrapper``) to start, and a results file left in
  ``~/.ansible_async``. The arguments are templated with the task (``omit`` drops a key);
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

import importlib.util
import json
import os
import re
import shlex

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

STEP_KEYS = frozenset(("script", "role", "package", "argv", "environment", "input_module"))

# The collection's root (this checkout, or the installed collection): a step's ``role`` names a
# role of it whose files/ holds the script, so that a task outside the role (a round running
# several roles' steps in one exchange) runs the role's own step definition.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

# Runs the steps on the host (Python 3.6 or later), in this one interpreter: each script in a
# fresh __main__ module with its own argv and the step's environment over the task's, so that
# a node's round pays one interpreter start (and one import of what the scripts share) instead
# of one per step. Standard input is the null device while the steps run, as it is for a child
# given its script on a pipe, or the step's input (read after the scripts) in an unnamed
# temporary file. A step's exit status is what the interpreter would make of its
# SystemExit or uncaught exception; the first non-zero one ends the run with that status,
# unless keep_going. A process a step forks and that returns into the runner (instead of
# os._exit) ends there, with that step's status.
STEPS_RUNNER = """\
import json, os, sys, traceback, types
run = json.loads(sys.stdin.buffer.readline())
sources = [sys.stdin.buffer.read(step["size"]) for step in run["steps"]]
inputs = [sys.stdin.buffer.read(step["input_size"]) for step in run["steps"]]
null = os.open(os.devnull, os.O_RDONLY)
runner, main, environ = os.getpid(), sys.modules["__main__"], dict(os.environ)
status = 0
for number, (step, source, data) in enumerate(zip(run["steps"], sources, inputs), 1):
    if data:
        import tempfile  # only then: every round's exchange on every host starts this runner
        with tempfile.TemporaryFile() as handle:
            handle.write(data)
            handle.seek(0)
            os.dup2(handle.fileno(), 0)
    else:
        os.dup2(null, 0)
    module = types.ModuleType("__main__")
    sys.modules["__main__"], sys.argv = module, ["-"] + step["argv"]
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(step["env"])
    try:
        exec(compile(source, step["name"], "exec"), module.__dict__)
        rc = 0
    except SystemExit as done:
        rc = done.code
        if rc is None:
            rc = 0
        elif not isinstance(rc, int):
            sys.stderr.write("%s\\n" % (rc,))
            rc = 1
    except BaseException:
        traceback.print_exc()
        rc = 1
    rc &= 255
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getpid() != runner:
        os._exit(rc)
    sys.modules["__main__"] = main
    if rc != 0:
        sys.stderr.write("step %d (%s) exited %d\\n" % (number, step["name"], rc))
        status = status or rc
        if not run["keep_going"]:
            break
sys.exit(status)
"""


# The runner's line for a failed step (a step's own stderr may have lines much like it).
_FAILED_STEP = re.compile(r"step \d+ \(.+\) exited \d+")


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("script", "role", "package", "argv", "steps", "keep_going",
                             "executable"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        if ("steps" in args) == bool(args.get("script")):
            raise AnsibleActionFail("give either script (with argv) or steps")
        steps = args["steps"] if "steps" in args else [{"script": args["script"],
                                                         "role": args.get("role"),
                                                         "package": args.get("package"),
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
            with open(self._script_path(step), "rb") as handle:
                sources.append(handle.read())
        inputs = [self._module_payload(step["input_module"], task_vars) if step["input_module"] else b""
                  for step in steps]
        if "steps" in args:
            # The runner reads a header line, then each script's bytes, then each step's input,
            # from standard input.
            header = {"keep_going": boolean(args.get("keep_going", False)),
                      "steps": [{"name": step["script"], "argv": step["argv"],
                                 "env": step["environment"], "size": len(source),
                                 "input_size": len(data)}
                                for step, source, data in zip(steps, sources, inputs)]}
            # The steps' scripts and words follow as the runner's own arguments, which it does
            # not read: they are what ps shows for it and for what a step forks and leaves
            # running (a monitor, a case's supervisor keep the runner's command line).
            words = [executable, "-c", STEPS_RUNNER]
            for step in steps:
                words += [os.path.basename(step["script"]), *step["argv"]]
            data = to_bytes(json.dumps(header)) + b"\n" + b"".join(sources) + b"".join(inputs)
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
            said = [line for line in lines if _FAILED_STEP.fullmatch(line)]
            result.update(failed=True, msg=said[0] if said else f"{steps[0]['script']} exited {done['rc']}")
        return result

    def _script_path(self, step):
        """Where a step's script is: in its ``role``'s files/, in its ``package``'s folder, else as
        ``script`` finds it."""
        if step.get("package"):
            found = importlib.util.find_spec(step["package"])
            base = (os.path.dirname(found.origin) if found and found.origin else
                    os.path.join(COLLECTION_ROOT, "src", step["package"]))
            path = os.path.realpath(os.path.join(base, step["script"]))
            if not path.startswith(os.path.realpath(base) + os.sep) or not os.path.isfile(path):
                raise AnsibleActionFail(f"package {step['package']} has no {step['script']}")
            return path
        if not step["role"]:
            return self._find_needle("files", step["script"])
        path = os.path.join(COLLECTION_ROOT, "roles", step["role"], "files", step["script"])
        if not os.path.isfile(path):
            raise AnsibleActionFail(f"role {step['role']} has no files/{step['script']}")
        return path

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
        """A step's script, argv, environment and input module; ``where`` prefixes the
        messages."""
        if not isinstance(step, dict) or not step.get("script") or set(step) - STEP_KEYS:
            raise AnsibleActionFail(f"{where.rstrip('.')} must be a mapping of script, role, package, argv, "
                                    "environment, input_module")
        role = to_text(step.get("role") or "")
        if role and not re.fullmatch(r"[a-z][a-z0-9_]*", role):
            raise AnsibleActionFail(f"{where}role must be a role name of this collection, got {role!r}")
        package = to_text(step.get("package") or "")
        if package and not re.fullmatch(r"[a-z][a-z0-9_]*", package):
            raise AnsibleActionFail(f"{where}package must be a Python package name, got {package!r}")
        if package and role:
            raise AnsibleActionFail(f"{where}give role or package, not both")
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
        return {"script": to_text(step["script"]), "role": role, "package": package, "argv": [to_text(word) for word in argv],
                "environment": {to_text(k): to_text(v) for k, v in environment.items()},
                "input_module": {"name": wanted["name"], "args": wanted.get("args") or {}} if wanted else None}
