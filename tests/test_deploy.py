"""The deploy role, run by ansible-playbook on localhost (a host path other than the checkout,
so it ships): the tree arrives whole with its modes, a second run changes nothing, a change or a
missing folder is shipped again, check mode writes nothing, hosts sharing the path unpack it
together, and a failed unpack says why in one line."""

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

PLAYBOOK = textwrap.dedent("""\
    - name: Deploy into a folder
      hosts: all
      gather_facts: false
      vars:
        ansible_connection: local
        ansible_python_interpreter: {interpreter}
      roles:
        - role: deploy
          vars:
            deploy_source: {source}
            deploy_root: {root}
            deploy_vendor: cpu
""")

# name -> mode; the controller's bytecode is left out.
CHECKOUT = {"benchmarks/driver/perflog.py": 0o644, "benchmarks/sleep/pytorch/run.py": 0o755,
            "benchmarks/sleep/pytorch/config/cpu.yaml": 0o600, "vendors/cpu/vendor.yml": 0o644,
            "vendors/cpu/docker_image/pytorch/Dockerfile": 0o644,
            "src/flagperf_host/readers/protobuf.py": 0o644}
LEFT_OUT = ["benchmarks/driver/__pycache__/perflog.cpython-311.pyc", "vendors/nvidia/vendor.yml",
            "src/flagperf_ansible/cli.py"]


def checkout(tmp_path: Path) -> Path:
    source = tmp_path / "checkout"
    for name, mode in CHECKOUT.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(f"# {name}\n")
        (source / name).chmod(mode)
    for name in LEFT_OUT:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("left out\n")
    return source


def deploy(tmp_path, project, venv_env, source, root, *args, hosts="localhost,"):
    """One ansible-playbook run of the role; (the run, {host: changed count}). The controller's
    temporary files go to ``tmp_path/controller-tmp``, which each run leaves empty."""
    playbook = tmp_path / "deploy.yml"
    playbook.write_text(PLAYBOOK.format(interpreter=sys.executable, source=source, root=root))
    scratch = tmp_path / "controller-tmp"
    scratch.mkdir(exist_ok=True)
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", hosts, *args],
                          cwd=project, env={**venv_env, "TMPDIR": str(scratch)},
                          capture_output=True, text=True, timeout=300)
    assert list(scratch.iterdir()) == [], done.stdout[-3000:]
    changed = {host: int(n) for host, n in
               re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", done.stdout, re.MULTILINE)}
    return done, changed


def shipped(root: Path) -> dict[str, int]:
    """{path under root: mode} of the files shipped (not the kept tar)."""
    return {str(p.relative_to(root)): stat_mode(p) for p in root.rglob("*")
            if p.is_file() and p.name != ".deploy-cpu.tar"}


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def assert_same_tree(source: Path, root: Path) -> None:
    assert shipped(root) == CHECKOUT
    assert all((root / name).read_text() == (source / name).read_text() for name in CHECKOUT)


def test_the_tree_arrives_whole_and_a_second_run_changes_nothing(tmp_path, project, venv_env):
    source, root = checkout(tmp_path), tmp_path / "flagperf"
    done, changed = deploy(tmp_path, project, venv_env, source, root)
    assert done.returncode == 0 and changed["localhost"] > 0, done.stdout[-3000:]
    assert_same_tree(source, root)

    # The tar is built again, to the same bytes: nothing to unpack.
    done, changed = deploy(tmp_path, project, venv_env, source, root)
    assert done.returncode == 0 and changed == {"localhost": 0}, done.stdout[-3000:]

    # A changed file, and a folder gone from the host: both shipped again.
    (source / "benchmarks/driver/perflog.py").write_text("# a new version\n")
    shutil.rmtree(root / "vendors/cpu")
    done, changed = deploy(tmp_path, project, venv_env, source, root)
    assert done.returncode == 0 and changed["localhost"] > 0, done.stdout[-3000:]
    assert_same_tree(source, root)


def test_check_mode_writes_nothing(tmp_path, project, venv_env):
    source, root = checkout(tmp_path), tmp_path / "flagperf"
    done, changed = deploy(tmp_path, project, venv_env, source, root, "--check")
    assert done.returncode == 0 and changed["localhost"] > 0, done.stdout[-3000:]
    assert not root.exists()


def test_hosts_that_share_the_path_unpack_it_together(tmp_path, project, venv_env):
    """Two hosts, one fresh folder (an NFS home): both tars write into it at once."""
    source, root = checkout(tmp_path), tmp_path / "flagperf"
    done, _ = deploy(tmp_path, project, venv_env, source, root, hosts="node1,node2,")
    assert done.returncode == 0, done.stdout[-3000:]
    assert_same_tree(source, root)
    done, changed = deploy(tmp_path, project, venv_env, source, root, hosts="node1,node2,")
    assert done.returncode == 0 and changed == {"node1": 0, "node2": 0}, done.stdout[-3000:]


def test_a_failed_unpack_says_why_in_one_line_and_is_tried_again_next_run(tmp_path, project,
                                                                          venv_env):
    """Folders left where the checkout has files (a case folder that became a file)."""
    source, root = checkout(tmp_path), tmp_path / "flagperf"
    for name in ("benchmarks/driver/perflog.py", "vendors/cpu/vendor.yml"):
        (root / name / "stale").mkdir(parents=True)
    done, _ = deploy(tmp_path, project, venv_env, source, root)
    assert done.returncode != 0, done.stdout[-3000:]
    (why,) = re.findall(r'^fatal: \[localhost\]: FAILED! => \{.*"msg": "(.*)"\}$', done.stdout,
                        re.MULTILINE)
    assert why == (f"could not unpack the case code into {root}: benchmarks/driver/perflog.py: "
                   "Cannot open: Is a directory (and 1 more)"), done.stdout[-3000:]
    assert "FAILED - RETRYING" not in done.stdout
    # Nothing recorded as unpacked: once the folders are gone, the next run ships the tree.
    assert not (root / ".deploy-cpu.tar").exists()
    for name in ("benchmarks/driver/perflog.py", "vendors/cpu/vendor.yml"):
        shutil.rmtree(root / name)
    done, _ = deploy(tmp_path, project, venv_env, source, root)
    assert done.returncode == 0, done.stdout[-3000:]
    assert_same_tree(source, root)
