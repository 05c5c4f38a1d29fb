"""Fetch one host folder to the controller as a single archive, streamed through files.

A task per file (find, then one fetch each) runs a Python module on the host for every file;
on a fleet that is most of a round's orchestration time. This action costs three exchanges per
host whatever the number of files, and whatever ``remove`` says: two shell commands and one
file transfer.

1. on the host, one command: copy ``extra_files`` that exist into ``src`` (created when
   missing), make a temporary file (``mktemp``: mode 600, under ``$TMPDIR`` or ``/tmp``) and
   pack ``src`` into it (``tar -cz``), leaving out ``exclude`` and ``large_artifacts``
   patterns; with ``large_artifacts``, the same tar first lists (``-v`` into ``/dev/null``,
   which GNU tar does without reading the files) what it would pack without them;
2. the connection's own ``fetch_file`` brings the archive to a temporary file on the controller
   (beside ``dest``, a hidden ``.<dest name>.*.tar.gz``; sftp or scp with the ssh connection:
   the archive streams to disk and is never held in memory, except where the ssh connection
   falls back to its ``piped`` transfer method, which reads the file into memory);
3. on the controller: unpack that file into ``dest`` (entries that would land outside
   ``dest``, links and devices are refused before anything is written);
4. on the host, one command: remove the temporary archive and, with ``remove`` and only once
   everything is unpacked, ``src``. When the fetch or the unpacking failed, the temporary
   archive alone is removed (``src`` is kept).

The controller's temporary file is removed whatever happens.

Options: ``src`` (host folder, required), ``dest`` (controller folder, required),
``extra_files`` (host files to add, missing ones skipped), ``exclude`` (tar patterns, default
``["*.pid"]``), ``large_artifacts`` (tar patterns of files left out and reported, e.g.
``["*.onnx", "*.engine", "*.pt"]``; default []), ``remove`` (bool, default true).
Needs ``sh``, ``mkdir``, ``cp``, ``mktemp``, ``tar`` with gzip (GNU tar for
``large_artifacts``: its ``--quoting-style``) and ``rm`` on the host, and a way for the
connection to fetch a file (sftp or scp for ssh).
Returns ``dest``, ``files`` (paths relative to ``dest``) and ``left_out`` (paths relative to
``src`` of the files that ``large_artifacts`` kept back; with ``remove`` they are removed from
the host with the rest of ``src``). Check mode changes nothing.
"""

from __future__ import annotations

import codecs
import os
import shlex
import tarfile
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

# Between the temporary archive's path and tar's listing in the first command's output.
_LISTING = "--- flagperf collect listing ---"


class ActionModule(ActionBase):
    # Nothing goes through Ansible's temporary folder on the host: no exchange to make or
    # remove one (the archive's own temporary file is made and removed by the two commands).
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("src", "dest", "extra_files", "exclude", "large_artifacts", "remove"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        src, dest = args.get("src"), args.get("dest")
        if not src or not dest:
            raise AnsibleActionFail("src and dest are required")
        extra_files = _strings(args.get("extra_files"), "extra_files")
        exclude = _strings(args.get("exclude", ["*.pid"]), "exclude")
        large = _strings(args.get("large_artifacts"), "large_artifacts")
        remove = boolean(args.get("remove", True), strict=True)
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing fetched")
            return result

        src = self._remote_expand_user(src).rstrip("/") or "/"
        remote_archive, listed = self._pack(src, extra_files, exclude, large)
        dest = os.path.abspath(os.path.expanduser(dest))
        try:
            os.makedirs(dest, exist_ok=True)
            fd, local_archive = tempfile.mkstemp(
                prefix=f".{os.path.basename(dest)}.", suffix=".tar.gz", dir=os.path.dirname(dest))
            os.close(fd)
            try:
                self._connection.fetch_file(remote_archive, local_archive)
                files = _unpack(local_archive, dest)
            finally:
                os.remove(local_archive)
        except BaseException:
            # The host's temporary archive goes, src stays; the failure told is the fetch's.
            try:
                self._host_command(f"rm -f {shlex.quote(remote_archive)}", "clean up")
            except Exception as error:  # pylint: disable=broad-exception-caught
                self._display.warning(f"collect: {error}")
            raise
        # One exchange: the temporary archive and, with remove, src (everything is unpacked).
        done = [f"rm -f {shlex.quote(remote_archive)}"]
        if remove:
            done.append(f"rm -rf {shlex.quote(src)}")
        self._host_command(" && ".join(done), "clean up")

        packed = {os.path.normpath(name) for name in files}
        left_out = sorted(name for name in listed if name not in packed) if large else []
        result.update(changed=True, dest=dest, files=files, left_out=left_out)
        return result

    def _pack(self, src: str, extra_files: list[str], exclude: list[str],
              large: list[str]) -> tuple[str, list[str]]:
        """Pack ``src`` into a temporary file on the host, in one exchange; its path and, with
        ``large``, the files tar would pack without ``large`` (paths relative to ``src``)."""
        quoted = shlex.quote(src)
        excluded = [shlex.quote(f"--exclude={pattern}") for pattern in exclude]
        script = [f"mkdir -p {quoted}"]
        script += [f"if [ -f {shlex.quote(f)} ]; then cp -p {shlex.quote(f)} {quoted}/; fi"
                   for f in extra_files]
        script.append('t=$(mktemp "${TMPDIR:-/tmp}/flagperf-collect.XXXXXXXXXX")')
        script.append(f'printf "%s\\n%s\\n" "$t" {shlex.quote(_LISTING)}')
        # What is packed goes into the file by the shell (mktemp's mode 600 stays); the file is
        # removed again when anything after mktemp fails.
        pack = ["tar", "-czf", "-", *excluded,
                *(shlex.quote(f"--exclude={pattern}") for pattern in large), "-C", quoted, "."]
        steps = [" ".join(pack) + ' > "$t"']
        if large:
            # C locale: every byte outside printable ASCII comes escaped, decoded by _listed.
            steps.insert(0, " ".join(["LC_ALL=C", "tar", "-cvf", "/dev/null",
                                      "--quoting-style=escape", *excluded, "-C", quoted, "."]))
        script.append("{ " + " && ".join(steps) + ' ; } || { rc=$?; rm -f "$t"; exit $rc; }')
        done = self._low_level_execute_command(" && ".join(script), sudoable=False)
        stdout = done.get("stdout") or ""
        head, sep, listing = stdout.partition(f"\n{_LISTING}\n")
        if done["rc"] != 0 or not sep or not head.strip():
            raise AnsibleActionFail(
                f"archive on the host failed (rc {done['rc']}): "
                f"{(done.get('stderr') or '').strip() or stdout.strip()}")
        return head.strip(), _listed(listing) if large else []

    def _host_command(self, command: str, what: str) -> None:
        done = self._low_level_execute_command(command, sudoable=False)
        if done["rc"] != 0:
            raise AnsibleActionFail(f"{what} on the host failed (rc {done['rc']}): "
                                    f"{(done.get('stderr') or done.get('stdout') or '').strip()}")


def _strings(value, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise AnsibleActionFail(f"{name} must be a list")
    return [to_text(item) for item in value]


def _listed(listing: str) -> list[str]:
    """The files (not folders) in GNU tar's verbose listing (escape quoting style, C locale),
    relative to the packed folder."""
    files = []
    for line in listing.splitlines():
        if not line or line.endswith("/"):
            continue
        raw = codecs.escape_decode(line.encode("ascii", "surrogateescape"))[0]
        files.append(os.path.normpath(os.fsdecode(raw)))
    return files


def _unpack(archive: str, dest: str) -> list[str]:
    """Regular files and folders of ``archive`` (a gzip tar file's path) into ``dest``; their
    paths relative to it. Every entry is checked before anything is written."""
    root = os.path.realpath(dest)
    files = []
    with tarfile.open(archive, mode="r:gz") as tar:
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
