"""Fetch one host folder to the controller as a single archive.

A task per file (find, then one fetch each) runs a Python module on the host for every file;
on a fleet that is most of a round's orchestration time. This action costs two ssh exchanges
per host (one with ``remove: false``), whatever the number of files:

0. with ``stop_steps``: first stop what still writes into ``src`` (a round's case, its
   monitor), as ``flagperf.benchmark.piped_script`` runs ``steps`` with ``keep_going`` (one
   more exchange, no more tasks); the files are fetched whatever the steps did, and a step
   that failed fails the task afterwards;
1. on the host: copy ``extra_files`` that exist into ``src`` (created when missing), then
   ``tar -cz`` of it to standard output, leaving out ``exclude`` patterns: the archive comes
   back as the command's output (no archive file on the host, no separate transfer);
2. on the controller: unpack it into ``dest`` (entries that would land outside ``dest``, links
   and devices are refused) and write each of ``logs`` there (file name -> text; empty texts
   are skipped);
3. on the host, with ``remove``: remove ``src``, only once everything is unpacked.

Options: ``src`` (host folder, required), ``dest`` (controller folder, required),
``extra_files`` (host files to add, missing ones skipped), ``exclude`` (tar patterns,
default ``["*.pid"]``), ``remove`` (bool, default true), ``logs`` (dict, default {}; a name
with a folder in it is refused), ``stop_steps`` (list of piped_script steps, default []) and
``python`` (their interpreter on the host, default ``python3``).
Needs ``sh``, ``mkdir``, ``cp``, ``tar`` with gzip and ``rm`` on the host. The archive is
held in memory on its way (a round's logs and samples: kilobytes to a few megabytes).
Returns ``dest``, ``files`` (paths relative to ``dest``) and, with ``stop_steps``,
``stopped`` (the steps' ``rc``, ``stdout``, ``stderr``; also when the archive failed, whose
message then names a failed step too). Check mode changes nothing.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    # Nothing goes through a temporary folder on the host: no exchange to make or remove one.
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("src", "dest", "extra_files", "exclude", "remove", "logs", "stop_steps",
                             "python"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        src, dest = args.get("src"), args.get("dest")
        if not src or not dest:
            raise AnsibleActionFail("src and dest are required")
        extra_files = list(args.get("extra_files") or [])
        exclude = list(args.get("exclude", ["*.pid"]) or [])
        remove = boolean(args.get("remove", True), strict=True)
        logs = {to_text(name): to_text(text or "") for name, text in (args.get("logs") or {}).items()}
        for name in logs:
            if name in ("", ".", "..") or "/" in name or "\\" in name:
                raise AnsibleActionFail(f"logs: not a plain file name: {name!r}")
        stop_steps = args.get("stop_steps") or []
        if not isinstance(stop_steps, list):
            raise AnsibleActionFail("stop_steps must be a list")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing fetched")
            return result
        stopped = self._stop(stop_steps, args.get("python") or "python3", task_vars) if stop_steps else None

        src = self._remote_expand_user(src).rstrip("/") or "/"
        pack = [f"mkdir -p {shlex.quote(src)}"]
        pack += [f"if [ -f {shlex.quote(f)} ]; then cp -p {shlex.quote(f)} {shlex.quote(src)}/; fi"
                 for f in extra_files]
        pack.append(" ".join(["tar", "-czf", "-",
                              *(f"--exclude={shlex.quote(p)}" for p in exclude),
                              "-C", shlex.quote(src), "."]))
        # The connection's own call, for the archive's bytes as they are (the low-level helper
        # decodes the output as text).
        rc, archive, stderr = self._connection.exec_command(
            "/bin/sh -c " + shlex.quote(" && ".join(pack)), sudoable=False)
        if rc != 0 or not archive:
            msg = (f"archive on the host failed (rc {rc}): "
                   f"{to_text(stderr, errors='surrogate_or_replace').strip()}")
            if stopped is not None and stopped.get("failed"):
                msg += f"; stopping failed too: {stopped.get('msg')}"
            raise AnsibleActionFail(msg, result=_stopped(stopped))

        dest = os.path.abspath(os.path.expanduser(dest))
        os.makedirs(dest, exist_ok=True)
        files = _unpack(io.BytesIO(archive), dest)
        if remove:
            self._host_command(f"rm -rf {shlex.quote(src)}", "clean up")
        for name, text in logs.items():
            if text:
                with open(os.path.join(dest, name), "w", encoding="utf-8") as out:
                    out.write(text)
                files = sorted({*files, name})
        result.update(changed=True, dest=dest, files=files)
        result.update(_stopped(stopped))
        if stopped is not None and stopped.get("failed"):
            result.update(failed=True,
                          msg=f"files fetched, but stopping failed: {stopped.get('msg')}")
        return result

    def _stop(self, steps, python, task_vars):
        """Run ``steps`` (keep_going) by the piped_script action, on this task's connection."""
        task = self._task.copy()
        task.args = {"steps": steps, "keep_going": True, "executable": python}
        action = self._shared_loader_obj.action_loader.get(
            "flagperf.benchmark.piped_script", task=task, connection=self._connection,
            play_context=self._play_context, loader=self._loader, templar=self._templar,
            shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)

    def _host_command(self, command: str, what: str) -> None:
        done = self._low_level_execute_command(command, sudoable=False)
        if done["rc"] != 0:
            raise AnsibleActionFail(f"{what} on the host failed (rc {done['rc']}): "
                                    f"{(done.get('stderr') or done.get('stdout') or '').strip()}")


def _stopped(stopped: dict | None) -> dict:
    """The stop steps' part of the task's result: ``{"stopped": {rc, stdout, stderr}}``, or {}."""
    if stopped is None:
        return {}
    return {"stopped": {key: stopped.get(key) for key in ("rc", "stdout", "stderr")}}


def _unpack(archive, dest: str) -> list[str]:
    """Regular files and folders of ``archive`` (a gzip tar file object) into ``dest``; their
    paths relative to it."""
    root = os.path.realpath(dest)
    files = []
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        members = []
        for member in tar.getmembers():
            target = os.path.realpath(os.path.join(root, member.name))
            if os.path.commonpath([root, target]) != root:
                raise AnsibleActionFail(f"archive entry outside the destination: {member.name}")
            if not (member.isfile() or member.isdir()):
                raise AnsibleActionFail(f"archive entry is not a file or folder: {member.name}")
            members.append(member)
            if member.isfile():
                files.append(os.path.relpath(target, root))
        tar.extractall(root, members=members, **({"filter": "data"}
                                                  if hasattr(tarfile, "data_filter") else {}))
    return sorted(files)
