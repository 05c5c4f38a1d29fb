"""The collect role, run by ansible-playbook on localhost (the local connection, whose host
commands and file fetch are the controller's own): the folder arrives byte for byte through
the connection's fetch_file, streamed through files (the controller's largest process does not
grow with the archive); collect_large_artifacts patterns are left out and listed in left_out;
collect_cleanup removes the host folder or keeps it; unsafe archive entries are refused; no
temporary archive is left on either side."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

PLAYBOOK = textwrap.dedent("""\
    - name: collect
      hosts: localhost
      gather_facts: false
      tasks:
        - name: Fetch
          ansible.builtin.include_role:
            name: collect
          vars: {role_vars}
""")

# Runs a command and prints the largest resident set (KiB) of any process under it that was
# waited for (ansible-playbook and its workers): RUSAGE_CHILDREN of a process of its own, so
# that no other test's children count.
PEAK_RSS = textwrap.dedent("""\
    import resource, subprocess, sys
    rc = subprocess.run(sys.argv[1:]).returncode
    print(f"PEAK_RSS_KIB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
    sys.exit(rc)
""")

# Stands in for the host's tar: whatever it is asked, writes a gzip archive whose one entry
# would land outside the destination, and notes the mode of the file it writes into.
ESCAPING_TAR = textwrap.dedent("""\
    import io, os, sys, tarfile
    with open(sys.argv[0] + ".mode", "w") as note:
        note.write(oct(os.fstat(1).st_mode & 0o777))
    data = b"escaped\\n"
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|gz") as tar:
        info = tarfile.TarInfo("./../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
""")

FETCH_TASK = "collect : Fetch the node's round files"


class Run:
    """One ansible-playbook run of the role: the host folder, the controller folder, the host's
    temporary folder, the collect task's result and the process's output."""

    def __init__(self, tmp_path, done, src, dest, host_tmp, log):
        self.tmp_path, self.done, self.src, self.dest, self.host_tmp = tmp_path, done, src, dest, host_tmp
        self.log = log.read_text() if log.exists() else ""
        self.result = None
        try:
            report = json.loads(done.stdout)
        except json.JSONDecodeError:
            return
        for play in report["plays"]:
            for task in play["tasks"]:
                if task["task"]["name"] == FETCH_TASK:
                    self.result = task["hosts"]["localhost"]

    def why(self) -> str:
        return self.done.stdout[-4000:] + self.done.stderr[-3000:]

    def peak_rss(self) -> int:
        """Bytes."""
        line = [x for x in self.done.stderr.splitlines() if x.startswith("PEAK_RSS_KIB=")][-1]
        return int(line.split("=", 1)[1]) * 1024


def run(tmp_path, project, venv_env, role_vars=None, files=None, path_first=None, measure=False,
        name="run"):
    """The role on localhost with ``role_vars`` (collect_src_dir and collect_dest_dir are set
    here), ``files`` (relative path -> bytes) written into the host folder first."""
    base = tmp_path / name
    src, dest, host_tmp = base / "host" / "node_noderank0", base / "results" / "node_noderank0", base / "host_tmp"
    host_tmp.mkdir(parents=True)
    for rel, data in (files or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    playbook, log = base / "play.yml", base / "ansible.log"
    playbook.write_text(PLAYBOOK.format(role_vars=json.dumps(
        {"collect_src_dir": str(src), "collect_dest_dir": str(dest), **(role_vars or {})})))
    env = dict(venv_env, TMPDIR=str(host_tmp), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOG_PATH=str(log), ANSIBLE_LOG_VERBOSITY="3")
    if path_first:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    command = ["ansible-playbook", str(playbook), "-i", "localhost,", "-c", "local"]
    if measure:
        command = [sys.executable, "-c", PEAK_RSS, *command]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    return Run(tmp_path, done, src, dest, host_tmp, log)


def tree(folder) -> dict[str, bytes]:
    """Every entry but folders under ``folder``: relative path -> content (a link: "-> target")."""
    return {str(p.relative_to(folder)): (f"-> {os.readlink(p)}".encode() if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or not p.is_dir()}


def assert_no_temporary_archive(ran):
    """Neither the host's (in its $TMPDIR) nor the controller's (beside dest) is left."""
    assert list(ran.host_tmp.iterdir()) == []
    assert [p.name for p in ran.dest.parent.iterdir()] in ([ran.dest.name], [])


def test_a_large_file_streams_through_fetch_file_byte_identical(tmp_path, project, venv_env):
    """64 MiB of random data (gzip cannot shrink it) arrives unchanged, by the connection's
    fetch_file of the host's temporary archive, and the controller's largest process grows by
    less than a quarter of it over a run that fetches a few bytes (holding the archive in
    memory, as the command's output, grows it by the whole archive)."""
    small = run(tmp_path, project, venv_env, files={"rank0.log": b"trained\n"}, measure=True,
                name="small")
    assert small.done.returncode == 0, small.why()

    size = 64 * 1024 * 1024
    data = os.urandom(size)
    files = {"rank0.log": b"trained\n", "launch.pid": b"1 1\n", "sub/big.bin": data}
    ran = run(tmp_path, project, venv_env, files=files, measure=True, name="large")
    assert ran.done.returncode == 0, ran.why()
    assert ran.result["files"] == ["rank0.log", "sub/big.bin"]
    assert ran.result["left_out"] == []
    got = tree(ran.dest)
    assert sorted(got) == ["rank0.log", "sub/big.bin"]
    assert hashlib.sha256(got["sub/big.bin"]).digest() == hashlib.sha256(data).digest()
    # The local connection's fetch_file logs what it fetched: the host's mktemp archive.
    assert f"FETCH {ran.host_tmp}/flagperf-collect." in ran.log, ran.log[-3000:]
    grown = ran.peak_rss() - small.peak_rss()
    assert grown < size // 4, (f"peak RSS {ran.peak_rss() >> 20} MiB against "
                               f"{small.peak_rss() >> 20} MiB for a small folder")
    assert not ran.src.exists()
    assert_no_temporary_archive(ran)


LARGE = {
    "rank0.log": b"trained\n",
    "sys_monitor.csv": b"t,cpu\n",
    "model.onnx": b"onnx",
    "sub/resnet.engine": b"engine",
    "sub/notes.txt": b"kept\n",
    "ckpt/step 1.pt": b"weights",
    "ckpt/na\u00efve\nname.pt": b"odd name",
    "launch.pid": b"1 1\n",
}


@pytest.mark.parametrize("cleanup", [False, True])
def test_large_artifacts_are_left_out_and_listed(tmp_path, project, venv_env, cleanup):
    """Left out of the fetch whatever folder they are in, listed relative to the host folder
    (odd names too); collect_cleanup false keeps the host folder as it was, true removes it."""
    files = LARGE
    ran = run(tmp_path, project, venv_env, files=files,
              role_vars={"collect_large_artifacts": ["*.onnx", "*.engine", "*.pt"],
                         "collect_cleanup": cleanup})
    assert ran.done.returncode == 0, ran.why()
    assert tree(ran.dest) == {"rank0.log": b"trained\n", "sys_monitor.csv": b"t,cpu\n",
                              "sub/notes.txt": b"kept\n"}
    assert ran.result["files"] == ["rank0.log", "sub/notes.txt", "sys_monitor.csv"]
    assert ran.result["left_out"] == sorted(
        ["model.onnx", "sub/resnet.engine", "ckpt/step 1.pt", "ckpt/na\u00efve\nname.pt"])
    if cleanup:
        assert not ran.src.exists()
    else:
        assert tree(ran.src) == files
    assert_no_temporary_archive(ran)


def test_without_large_artifacts_nothing_is_left_out(tmp_path, project, venv_env):
    """The default: everything but pid files is fetched, left_out is empty, cleanup is on."""
    files = {"rank0.log": b"trained\n", "model.onnx": b"onnx", "launch.pid": b"1 1\n"}
    ran = run(tmp_path, project, venv_env, files=files)
    assert ran.done.returncode == 0, ran.why()
    assert tree(ran.dest) == {"rank0.log": b"trained\n", "model.onnx": b"onnx"}
    assert ran.result["left_out"] == []
    assert not ran.src.exists()
    assert_no_temporary_archive(ran)


def test_a_link_in_the_folder_is_refused_and_the_host_folder_kept(tmp_path, project, venv_env):
    files = {"rank0.log": b"trained\n"}
    (tmp_path / "run" / "host" / "node_noderank0").mkdir(parents=True)
    (tmp_path / "run" / "host" / "node_noderank0" / "passwd").symlink_to("/etc/passwd")
    ran = run(tmp_path, project, venv_env, files=files)
    assert ran.done.returncode == 2, ran.why()
    assert ran.result["failed"] is True
    assert ran.result["msg"] == "archive entry is not a file or folder: ./passwd"
    assert tree(ran.dest) == {}
    assert tree(ran.src) == {**files, "passwd": b"-> /etc/passwd"}
    assert_no_temporary_archive(ran)


def test_an_entry_outside_the_destination_is_refused(tmp_path, project, venv_env):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "tar").write_text(f"#!{sys.executable}\n{ESCAPING_TAR}")
    (fake / "tar").chmod(0o755)
    ran = run(tmp_path, project, venv_env, files={"rank0.log": b"trained\n"}, path_first=fake)
    assert ran.done.returncode == 2, ran.why()
    assert ran.result["msg"] == "archive entry outside the destination: ./../escaped.txt"
    assert not (ran.dest.parent / "escaped.txt").exists()
    # The host's temporary archive was private to its owner while it existed.
    assert (fake / "tar.mode").read_text() == "0o600"
    assert tree(ran.dest) == {}
    assert tree(ran.src) == {"rank0.log": b"trained\n"}
    assert_no_temporary_archive(ran)


def test_an_archive_that_fails_on_the_host_fails_the_task(tmp_path, project, venv_env):
    """The host folder cannot be made (its parent is a file): nothing is fetched."""
    (tmp_path / "not-a-folder").write_text("")
    ran = run(tmp_path, project, venv_env,
              role_vars={"collect_src_dir": str(tmp_path / "not-a-folder" / "node_noderank0")})
    assert ran.done.returncode == 2, ran.why()
    assert ran.result["msg"].startswith("archive on the host failed (rc 1): mkdir: "), ran.result["msg"]
    assert not ran.dest.exists()
    assert list(ran.host_tmp.iterdir()) == []
