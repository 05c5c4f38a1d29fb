"""The deploy role, run by ansible-playbook on localhost: a copy that failed as one does when
hosts on a shared filesystem make the same folder at once is tried again; another failure is
not."""

import stat
import subprocess
import sys
import textwrap

PLAYBOOK = textwrap.dedent("""\
    - name: Deploy into a folder
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: {interpreter}
      roles:
        - role: deploy
          vars:
            deploy_source: {source}
            deploy_root: {root}
            deploy_vendor: cpu
""")

# The host's Python, except that the first copy module run it is given fails as the copy module
# does when another host made the folder between its check and its makedirs. (The race itself
# depends on timing; this is what the losing host reports.) The copy module's payload names it
# as module_fqn='ansible.modules.copy', quote included, unlike the stat and file payloads.
LOSES_ONE_RACE = textwrap.dedent("""\
    #!{python}
    import json, os, subprocess, sys
    payload = sys.stdin.buffer.read()
    program = open(sys.argv[1], "rb").read() if sys.argv[1:] else payload
    marker = {marker!r}
    if b"ansible.modules.copy'" in program and not os.path.exists(marker):
        open(marker, "w").close()
        print(json.dumps({{"failed": True, "msg": {message!r}}}))
        sys.exit(1)
    sys.exit(subprocess.run([{python!r}, *sys.argv[1:]], input=payload).returncode)
""")


def deploy_losing_once(tmp_path, project, venv_env, message):
    """Deploy a small checkout (a copy costs a module run per file) on localhost, the first
    copy module run failing with ``message``; (the play's result, source, root)."""
    source = tmp_path / "checkout"
    for name in ("benchmarks/driver/perflog.py", "benchmarks/sleep/pytorch/run.py",
                 "vendors/cpu/vendor.yml"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(f"# {name}\n")
    root = tmp_path / "flagperf"
    marker = tmp_path / "lost-once"
    interpreter = tmp_path / "python"
    interpreter.write_text(LOSES_ONE_RACE.format(python=sys.executable, marker=str(marker),
                                                 message=message))
    interpreter.chmod(interpreter.stat().st_mode | stat.S_IXUSR)
    playbook = tmp_path / "deploy.yml"
    playbook.write_text(PLAYBOOK.format(interpreter=interpreter, source=source, root=root))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,", "-c", "local"],
                          cwd=project, env=venv_env, capture_output=True, text=True, timeout=300)
    assert marker.exists()
    return done, source, root


def retried(done):
    return [line for line in done.stdout.splitlines() if "FAILED - RETRYING" in line]


def test_a_copy_that_lost_a_race_for_a_folder_is_tried_again(tmp_path, project, venv_env):
    message = f"[Errno 17] File exists: b'{tmp_path}/flagperf/benchmarks/driver'"
    done, source, root = deploy_losing_once(tmp_path, project, venv_env, message)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert len(retried(done)) == 1 and "Copy what changed" in retried(done)[0], done.stdout[-3000:]
    shipped = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file()) == shipped
    assert all((root / name).read_text() == (source / name).read_text() for name in shipped)


def test_another_copy_failure_fails_the_host_at_once(tmp_path, project, venv_env):
    message = f"[Errno 13] Permission denied: b'{tmp_path}/flagperf/benchmarks/driver'"
    done, _, _ = deploy_losing_once(tmp_path, project, venv_env, message)
    assert done.returncode != 0 and retried(done) == [], done.stdout[-3000:]
    assert "Permission denied" in done.stdout
