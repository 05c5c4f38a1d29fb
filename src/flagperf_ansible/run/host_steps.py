"""One ssh exchange that runs several steps on a host in one Python: the command and its input.

A step is an entry module of the host package (``flagperf_host.node_job``), run as
``python -m`` runs it, or a script's text. The host's Python gets a small runner as ``-c``
and, on its standard input, a header line, the scripts, the host package's archive (when a
step runs one of its modules: ``host_archive``) and each step's input. The runner holds the
archive in an unnamed in-memory file (``memfd_create``; an unnamed temporary file where that
is refused) and puts it on ``sys.path`` as ``/dev/fd/N``: nothing is written to the host's
disk, nothing need be installed first, and checkouts of different versions sharing a host
each run their own. A process a step forks keeps the descriptor, and so the package.

Used by the ``piped_script`` and ``node_wait`` action plugins.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field

from flagperf_ansible.run import host_archive

#: The host package's name: a step's ``module`` is one of its entry modules.
HOST_PACKAGE = host_archive.PACKAGE_DIR.name

# Runs the steps on the host (Python 3.8 or later), in this one interpreter: each script in a
# fresh __main__ module, each module as runpy runs it for ``python -m``, with its own argv and
# the step's environment over the task's, so that a node's round pays one interpreter start
# (and one import of what the steps share) instead of one per step. Standard input is the
# null device while the steps run, as it is for a child given its script on a pipe, or the
# step's input (read after the scripts) in an unnamed temporary file. A step's exit status is
# what the interpreter would make of its SystemExit or uncaught exception; the first non-zero
# one ends the run with that status, unless keep_going. A process a step forks and that
# returns into the runner (instead of os._exit) ends there, with that step's status.
STEPS_RUNNER = """\
import json, os, sys, traceback, types
run = json.loads(sys.stdin.buffer.readline())
sources = [sys.stdin.buffer.read(step["size"]) for step in run["steps"]]
archive = sys.stdin.buffer.read(run["archive_size"])
inputs = [sys.stdin.buffer.read(step["input_size"]) for step in run["steps"]]
if archive:
    try:
        held = os.memfd_create("flagperf_host")
    except (AttributeError, OSError):
        import tempfile
        spare = tempfile.TemporaryFile()
        held = os.dup(spare.fileno())
        spare.close()
    with open(held, "wb", closefd=False) as handle:
        handle.write(archive)
    sys.path.insert(0, "/dev/fd/%d" % held)
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
    sys.modules["__main__"], sys.argv = module, [step["name"]] + step["argv"]
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(step["env"])
    try:
        if step.get("module"):
            import runpy
            runpy.run_module(step["module"], run_name="__main__", alter_sys=True)
        else:
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


def is_entry_module(name: str) -> bool:
    """Whether ``name`` is a module name inside the host package (``flagperf_host.node_job``)."""
    package, dot, rest = name.partition(".")
    return package == HOST_PACKAGE and bool(dot) and all(part.isidentifier() for part in rest.split("."))


@dataclass
class Step:
    """One step: ``module`` (an entry module of the host package) or ``script`` (a name) with
    its ``source`` (the script's bytes); ``argv`` its words, ``env`` added to the exchange's
    environment for this step, ``input`` its standard input (else the null device)."""

    argv: list[str] = field(default_factory=list)
    module: str = ""
    script: str = ""
    source: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    input: bytes = b""

    @property
    def name(self) -> str:
        """What messages and ``ps`` call the step: the module, or the script's file name."""
        return self.module or os.path.basename(self.script)


def exchange(executable: str, steps: list[Step], keep_going: bool = False) -> tuple[str, bytes]:
    """The shell command that runs ``steps`` with the host's Python ``executable``, and the
    bytes for its standard input.

    The steps' names and words follow as the runner's own arguments, which it does not read:
    they are what ``ps`` shows for it and for what a step forks and leaves running (a monitor,
    a case's supervisor keep the runner's command line).

    Raises:
        ValueError: a step's module is not in the host package.
        OSError: the host package's archive cannot be built.
    """
    for step in steps:
        if step.module and not is_entry_module(step.module):
            raise ValueError(f"module {step.module!r} is not one of {HOST_PACKAGE}'s")
    archive = host_archive.archive()[0] if any(step.module for step in steps) else b""
    header = {"keep_going": keep_going, "archive_size": len(archive),
              "steps": [{"name": step.name, "module": step.module, "argv": step.argv, "env": step.env,
                         "size": len(step.source), "input_size": len(step.input)} for step in steps]}
    words = [executable, "-c", STEPS_RUNNER]
    for step in steps:
        words += [step.name, *step.argv]
    data = (json.dumps(header).encode() + b"\n" + b"".join(step.source for step in steps) + archive
            + b"".join(step.input for step in steps))
    return " ".join(shlex.quote(word) for word in words), data
