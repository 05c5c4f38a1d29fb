"""The preflight check of the host folders a run writes and the data its cases read
(src/flagperf_host/folders_check.py): the entry module alone, run as non-root users on real
folders, then preflight failing with one line per problem before anything is shipped.

The tests run as root (root writes and reads everything): the check runs as ``nobody``
(``runuser``) or as a uid with chosen groups (``setpriv``), in the system's Python as a host
would run it (``python3 -m flagperf_host.folders_check`` from the host archive, which
``tests/host_side.py`` writes into a folder every user can read)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

import host_side
from unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
# A host's Python, not the venv's (which another user may not be able to run).
HOST_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
# A uid and gids no account has (setpriv takes numbers): its home is $HOME.
UID, GID, SHARED_GID = 12345, 12345, 4242


@pytest.fixture(autouse=True)
def root_and_host_python():
    """Root, to run the check as other users, and the system's Python."""
    if os.geteuid() != 0 or HOST_PYTHON is None:
        unavailable("needs root (to run the check as other users) and /usr/bin/python3")


@pytest.fixture
def base():
    """A folder every user can traverse (pytest's tmp_path is under a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="flagperf-host-folders-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def folder(path: Path, mode: int = 0o755, owner: tuple[int, int] = (0, 0)) -> Path:
    path.mkdir(parents=True)
    os.chown(path, *owner)
    path.chmod(mode)
    return path


def data_file(path: Path, mode: int = 0o644, group: int = 0) -> Path:
    path.write_bytes(b"x")
    os.chown(path, 0, group)
    path.chmod(mode)
    return path


def check(request: dict, *, user: str | None = None, uid: int | None = None,
          groups: tuple[int, ...] = (), home: Path | None = None) -> subprocess.CompletedProcess:
    """``python3 -m flagperf_host.folders_check REQUEST`` in the host's Python, the archive on
    its path, as ``user`` (runuser), or as ``uid``:GID with ``groups`` as its supplementary
    groups (setpriv); as root when neither is given."""
    prefix: list[str] = []
    if user:
        prefix = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--"]
    elif uid is not None:
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={GID}",
                  f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"]
    env = host_side.env({"PATH": "/usr/bin:/bin", "HOME": str(home or "/nonexistent")})
    argv = host_side.command("folders_check", json.dumps(request), python=HOST_PYTHON)
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, env=env, timeout=60,
                          cwd="/")


def write(setting: str, path: Path, *subfolders: str) -> dict:
    return {"write": [{"setting": setting, "path": str(path), "subfolders": list(subfolders)}]}


def read(case_id: str, data_dir: Path, checkpoint: str | None = None, container: bool = False) -> dict:
    return {"read": [[case_id, str(data_dir), {"path": checkpoint} if checkpoint else None]],
            "container": container}


# --- the folders a run writes -----------------------------------------------------------------

def test_a_folder_under_a_parent_the_user_cannot_write_is_named_with_owner_and_mode(base):
    locked = folder(base / "locked", 0o555)
    done = check(write("flagperf_workdir", locked / "work", "build"), user="nobody")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"flagperf_workdir {locked}/work: not writable by user nobody (parent {locked} owned by "
        f"root:root, mode 555); set flagperf_workdir to a folder user nobody can write"]


def test_a_folder_outside_the_users_home_gets_a_home_folder_suggested(base):
    home = folder(base / "home", owner=(UID, GID))
    done = check(write("flagperf_root", base / "opt" / "flagperf", "benchmarks"), uid=UID, home=home)
    assert done.stdout.splitlines() == [
        f"flagperf_root {base}/opt/flagperf: not writable by user uid {UID} (parent {base} owned by "
        f"root:root, mode 755); set flagperf_root under the user's home, e.g. {home}/flagperf"]


def test_a_subfolder_left_by_an_earlier_run_as_another_user_is_named(base):
    home = folder(base / "home", owner=(UID, GID))
    root = folder(home / "flagperf", owner=(UID, GID))
    folder(root / "benchmarks")   # root's, from a run as root
    done = check(write("flagperf_root", root, "benchmarks", "vendors/cpu"), uid=UID, home=home)
    assert done.stdout.splitlines() == [
        f"flagperf_root {root}: not writable by user uid {UID} (its subfolder benchmarks owned by "
        f"root:root, mode 755); give {root}/benchmarks to user uid {UID} (chown) or set "
        f"flagperf_root elsewhere"]


def test_a_parent_the_user_cannot_traverse_is_named(base):
    secret = folder(base / "secret", 0o700)
    done = check(write("flagperf_workdir", secret / "a" / "work"), user="nobody")
    assert done.stdout.splitlines() == [
        f"flagperf_workdir {secret}/a/work: not reachable by user nobody (parent {secret} not "
        f"traversable: owned by root:root, mode 700); set flagperf_workdir to a folder user nobody "
        f"can write"]


def test_a_file_where_a_folder_goes_is_named(base):
    data_file(base / "flagperf")
    done = check(write("flagperf_root", base / "flagperf" / "sub"))
    assert done.stdout.splitlines() == [
        f"flagperf_root {base}/flagperf/sub: {base}/flagperf is a file, not a folder; set "
        f"flagperf_root to a folder path"]


def test_folders_the_user_can_make_or_write_pass(base):
    home = folder(base / "home", owner=(UID, GID))
    folder(folder(home / "flagperf", owner=(UID, GID)) / "vendors", owner=(UID, GID))
    request = {"write": [{"setting": "flagperf_root", "path": str(home / "flagperf"),
                          "subfolders": ["benchmarks", "vendors/cpu"]},
                         {"setting": "flagperf_workdir", "path": str(home / "new" / "work"),
                          "subfolders": ["build"]}]}
    done = check(request, uid=UID, home=home)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # root (the local inventory, a root ssh user) writes the defaults' parents.
    done = check({"write": [{"setting": "flagperf_workdir", "path": str(base / "locked" / "w"),
                             "subfolders": []}]})
    assert done.returncode == 0, done.stdout


# --- the data folders its cases read ---------------------------------------------------------

def test_an_unreadable_file_in_a_data_folder_is_named(base):
    data = folder(base / "data")
    folder(data / "train")
    data_file(data / "train" / "a.jpg")
    secret = data_file(data / "train" / "b.jpg", 0o600)
    done = check(read("resnet50-pytorch-A100x1x8", data), user="nobody")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"case resnet50-pytorch-A100x1x8: data_dir {data}: {secret} not readable by user nobody: "
        f"owned by root:root, mode 600"]


def test_an_unreadable_subfolder_and_an_untraversable_parent_are_named(base):
    data = folder(base / "data")
    val = folder(data / "val", 0o700)
    folder(data / "train")
    hidden = folder(base / "private", 0o700)
    folder(hidden / "data")
    request = {"read": [["c1", str(data), None], ["c1", str(data), None],   # rounds 1 and 2
                        ["c2", str(hidden / "data"), None], ["c3", str(base / "none"), None]]}
    done = check(request, user="nobody")
    assert done.stdout.splitlines() == [
        f"case c1: data_dir {data}: {val} not readable by user nobody: owned by root:root, mode 700",
        f"case c2: data_dir {hidden}/data: {hidden} not traversable by user nobody: owned by "
        f"root:root, mode 700"]   # c3's missing folder: the layout check's to name


def test_a_file_readable_through_a_supplementary_group_only_fails_in_containers(base):
    """docker run --user UID:GID gives the container's processes no supplementary group."""
    data = folder(base / "data")
    shared = data_file(data / "part-0.bin", 0o640, group=SHARED_GID)
    # The ssh user itself (runtime none) reads it through its group.
    done = check(read("c1", data), uid=UID, groups=(GID, SHARED_GID))
    assert (done.returncode, done.stdout) == (0, "")
    done = check(read("c1", data, container=True), uid=UID, groups=(GID, SHARED_GID))
    group = str(SHARED_GID)
    try:
        group = grp.getgrgid(SHARED_GID).gr_name
    except KeyError:
        pass
    assert done.stdout.splitlines() == [
        f"case c1: data_dir {data}: {shared} not readable by the containers' user uid {UID} "
        f"(uid {UID}, gid {GID}, no supplementary groups): owned by root:{group}, mode 640"]


def test_the_checkpoint_is_checked_and_the_walk_is_a_bounded_sample(base):
    from flagperf_host import folders_check

    data = folder(base / "data")
    for number in range(200):
        data_file(data / f"{number:04d}.bin", 0o600)
    done = check(read("c1", data), user="nobody")
    # One line; only the sampled entries were looked at.
    (line,) = done.stdout.splitlines()
    assert line.endswith(f"; {folders_check.TOP_SAMPLE - 1} more in the entries sampled")

    readable = folder(base / "readable")
    folder(readable / "models" / "bit")   # deeper than the sample goes
    checkpoint = data_file(readable / "models" / "bit" / "ckpt.npz", 0o600)
    done = check(read("c2", readable, "models/bit/ckpt.npz"), user="nobody")
    assert done.stdout.splitlines() == [
        f"case c2: data_dir {readable}: {checkpoint} not readable by user nobody: owned by "
        f"root:root, mode 600"]


def test_a_bad_request_is_one_line_and_exit_2():
    done = check({"write": [{"setting": "flagperf_root", "path": "relative"}]})
    assert (done.returncode, done.stdout) == (
        2, "folders_check: write must be a list of {setting, path (absolute), subfolders}\n")


# --- preflight ---------------------------------------------------------------------------------

def fatal_lines(output: str) -> list[str]:
    """The lines of every host's failure message (``fatal: [host]: FAILED! => {...}``)."""
    lines = []
    for document in re.findall(r"^fatal: \[[^\]]+\]: FAILED! => (\{.*\})$", output, re.MULTILINE):
        lines += json.loads(document)["msg"].splitlines()
    return lines


def test_preflight_stops_before_prepare_when_the_workdir_is_not_writable(base, venv_env, tmp_path):
    """The local inventory, its host reached as ``nobody`` (become, method su): the one line,
    and the prepare phase never starts."""
    if shutil.which("su") is None:
        unavailable("needs su (util-linux)")
    locked = folder(base / "locked", 0o555)
    settings = {"flagperf_cases": ["sleep:pytorch:cpu:1:1:1"], "flagperf_clear_caches": False,
                "flagperf_results_dir": str(tmp_path), "flagperf_workdir": f"{locked}/work",
                "flagperf_python": HOST_PYTHON,
                "ansible_become": True, "ansible_become_method": "su",
                "ansible_become_user": "nobody", "ansible_become_flags": "-s /bin/sh"}
    done = subprocess.run(["ansible-playbook", "site.yml", "-i", "inventories/local",
                           "-e", json.dumps(settings)],
                          cwd=ROOT, env=venv_env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert fatal_lines(done.stdout) == [
        f"host localhost: flagperf_workdir {locked}/work: not writable by user nobody (parent "
        f"{locked} owned by root:root, mode 555); set flagperf_workdir to a folder user nobody can "
        f"write"], done.stdout[-3000:]
    assert "PLAY [Prepare the hosts" not in done.stdout
    assert not (locked / "work").exists()


def test_preflight_passes_for_root_with_the_local_inventory(venv_env, tmp_path):
    done = subprocess.run(["ansible-playbook", "playbooks/preflight.yml", "-i", "inventories/local",
                           "-e", json.dumps({"flagperf_cases": ["sleep:pytorch:cpu:1:1:1"],
                                             "flagperf_results_dir": str(tmp_path),
                                             "flagperf_workdir": str(tmp_path / "work")})],
                          cwd=ROOT, env=venv_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "TASK [preflight : Check the host folders the run writes" in done.stdout


def test_the_defaults_fail_preflight_for_a_non_root_ssh_user_on_two_hosts(cluster, base, venv_env,
                                                                         tmp_path):
    """The report: two sshd hosts, the non-root ssh user flagperf-ci (group docker), runtime
    docker, flagperf_root left at its default. Every problem of every host is one line, and
    nothing is shipped or built."""
    import loopback_cluster

    default_root = yaml.safe_load((ROOT / "roles/flagperf/defaults/main.yml").read_text())["flagperf_root"]
    existed = Path(default_root).exists()
    user = loopback_cluster.USER
    private = folder(base / "private")
    secret = data_file(private / "a.bin", 0o600)
    shared = folder(base / "shared")
    grouped = data_file(shared / "b.bin", 0o640, group=grp.getgrnam("docker").gr_gid)
    cases = [{"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 2,
              "nproc_per_node": 1, "repeat": 1, "data_dir": str(private)},
             {"model": "efficientnet", "framework": "pytorch", "hardware": "cpu", "nnodes": 2,
              "nproc_per_node": 1, "repeat": 1, "data_dir": str(shared)}]
    done = subprocess.run(["ansible-playbook", "site.yml", "-i", str(cluster.inventory),
                           "-e", json.dumps({"flagperf_root": default_root, "flagperf_cases": cases,
                                             "flagperf_results_dir": str(tmp_path)})],
                          cwd=ROOT, env=venv_env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    lines = fatal_lines(done.stdout)
    pw = pwd.getpwnam(user)
    who = f"the containers' user {user} (uid {pw.pw_uid}, gid {pw.pw_gid}, no supplementary groups)"
    for host in ("node1", "node2"):
        root_line, private_line, shared_line = [line for line in lines if line.startswith(f"host {host}: ")]
        assert re.fullmatch(
            rf"host {host}: flagperf_root {default_root}: not writable by user {user} \((parent \S+ )?"
            rf"owned by root:root, mode \d+\); set flagperf_root under the user's home, e\.g\. "
            rf"{pw.pw_dir}/flagperf", root_line), root_line
        assert re.fullmatch(rf"host {host}: case resnet50-\S+: data_dir {private}: {secret} not "
                            rf"readable by {re.escape(who)}: owned by root:root, mode 600", private_line)
        assert re.fullmatch(rf"host {host}: case efficientnet-\S+: data_dir {shared}: {grouped} not "
                            rf"readable by {re.escape(who)}: owned by root:docker, mode 640", shared_line)
    assert "PLAY [Prepare the hosts" not in done.stdout
    assert Path(default_root).exists() == existed
