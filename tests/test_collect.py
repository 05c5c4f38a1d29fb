"""The collect role, run by ansible-playbook on localhost: with collect_stop_steps, the steps
run first (what they write is fetched), the files are fetched even when a step fails, and the
task fails afterwards naming the step (also when the archive fails); the host folder is removed
only after the fetch."""

import json
import subprocess
import textwrap

STEP = textwrap.dedent("""\
    import pathlib, sys
    # What a stopping monitor does last: write its final file into the folder.
    pathlib.Path(sys.argv[1], sys.argv[2]).write_text("written by the stop step\\n")
    sys.exit(int(sys.argv[3]))
""")

PLAYBOOK = textwrap.dedent("""\
    - name: collect
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: Stop, then fetch
          ansible.builtin.include_role:
            name: collect
          vars:
            collect_src_dir: "{src}"
            collect_dest_dir: "{dest}"
            collect_stop_steps:
              - script: last_words.py
                argv: ["{src}", first.txt, "{first_rc}"]
              - script: last_words.py
                argv: ["{src}", second.txt, "0"]
            collect_python: "{{{{ ansible_playbook_python }}}}"
""")


def run(tmp_path, project, venv_env, first_rc, host="host"):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "last_words.py").write_text(STEP)
    src, dest = tmp_path / host / "node_noderank0", tmp_path / "results" / "node_noderank0"
    if host == "host":
        src.mkdir(parents=True)
        (src / "rank0.log").write_text("trained\n")
        (src / "launch.pid").write_text("1 1\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(src=src, dest=dest, first_rc=first_rc))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,", "-c", "local", "-v"],
                          cwd=project, env=venv_env, capture_output=True, text=True, timeout=120)
    return done, src, dest


def test_the_stop_steps_run_before_the_fetch(tmp_path, project, venv_env):
    done, src, dest = run(tmp_path, project, venv_env, 0)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in dest.iterdir()) == ["first.txt", "rank0.log", "second.txt"]
    assert (dest / "second.txt").read_text() == "written by the stop step\n"
    assert not src.exists()


def test_a_failed_stop_step_keeps_the_files_and_fails_the_task(tmp_path, project, venv_env):
    done, src, dest = run(tmp_path, project, venv_env, 3)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    # Every step ran (the later ones too), everything was fetched, then the task failed.
    assert sorted(p.name for p in dest.iterdir()) == ["first.txt", "rank0.log", "second.txt"]
    assert not src.exists()
    failed = json.loads(done.stdout.split("FAILED! => ", 1)[1].split("\n\nPLAY RECAP", 1)[0])
    assert failed["msg"] == "files fetched, but stopping failed: step 1 (last_words.py) exited 3"
    assert failed["stopped"]["rc"] == 3
    assert failed["files"] == ["first.txt", "rank0.log", "second.txt"]


def test_an_archive_that_fails_after_a_failed_stop_step_names_both(tmp_path, project, venv_env):
    """The host folder cannot be made (its parent is a file): the steps fail writing into it,
    then the archive fails; the task's message and result keep what the steps said."""
    (tmp_path / "not-a-folder").write_text("")
    done, src, dest = run(tmp_path, project, venv_env, 0, host="not-a-folder")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    failed = json.loads(done.stdout.split("FAILED! => ", 1)[1].split("\n\nPLAY RECAP", 1)[0])
    assert failed["msg"].startswith("archive on the host failed (rc 1): mkdir: ")
    assert failed["msg"].endswith("; stopping failed too: step 1 (last_words.py) exited 1")
    assert failed["stopped"]["rc"] == 1
    assert "NotADirectoryError" in failed["stopped"]["stderr"]
    assert not dest.exists()
