"""flagperf.benchmark.piped_script, run by ansible-playbook on localhost: arguments arrive as
words (nothing expanded), the task's environment applies, a non-zero exit fails the task,
a background process it leaves does not hold the task, check mode runs nothing; several steps
run in one task and one interpreter, in order, each with its own words and environment."""

import json
import os
import signal
import subprocess
import textwrap

SCRIPT = textwrap.dedent("""\
    import json, os, subprocess, sys
    child = None
    if sys.argv[1:2] == ["detach"]:
        # A background process with its own streams, outliving the playbook's time limit:
        # the task must not wait for it.
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True).pid
    print(json.dumps({"argv": sys.argv[1:], "env": os.environ.get("PIPED_SCRIPT_TEST"),
                      "child": child}))
    # What a script may say itself, like the runner's line for a failed step.
    print("step 1 (of a training loop) exited its warm-up", file=sys.stderr)
    sys.exit(int(os.environ.get("PIPED_SCRIPT_EXIT", "0")))
""")

PLAYBOOK = textwrap.dedent("""\
    - name: piped_script
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: Words as they are, with the task's environment
          flagperf.benchmark.piped_script:
            script: echo_args.py
            argv: ["a b", "$(touch {marker})", "it's", 3]
            executable: "{{{{ ansible_playbook_python }}}}"
          environment:
            PIPED_SCRIPT_TEST: "x y"
          register: words

        - name: A failing script fails the task
          flagperf.benchmark.piped_script:
            script: echo_args.py
            executable: "{{{{ ansible_playbook_python }}}}"
          environment:
            PIPED_SCRIPT_EXIT: "3"
          register: failing
          ignore_errors: true

        - name: A process left in the background does not hold the task
          flagperf.benchmark.piped_script:
            script: echo_args.py
            argv: [detach]
            executable: "{{{{ ansible_playbook_python }}}}"
          register: detached

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{{{ {{'words': words, 'failing': failing, 'detached': detached}} | to_json }}}}"
            dest: "{out}"
            mode: "0644"
          check_mode: false
""")


def run(tmp_path, project, venv_env, *extra):
    (tmp_path / "files").mkdir(exist_ok=True)
    (tmp_path / "files" / "echo_args.py").write_text(SCRIPT)
    marker, out = tmp_path / "expanded", tmp_path / "out.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(marker=marker, out=out))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,",
                           "-c", "local", *extra],
                          cwd=project, env=venv_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), marker, done.stdout


def play(tmp_path, project, venv_env, playbook: str, scripts: dict[str, str]) -> dict:
    """Run ``playbook`` (formatted with ``out`` and ``marker``) on localhost with ``scripts``
    in its files/ folder; the results its last task wrote to ``out``."""
    (tmp_path / "files").mkdir(exist_ok=True)
    for name, text in scripts.items():
        (tmp_path / "files" / name).write_text(text)
    out = tmp_path / "out.json"
    path = tmp_path / "play.yml"
    path.write_text(playbook.format(out=out, marker=tmp_path / "expanded"))
    done = subprocess.run(["ansible-playbook", str(path), "-i", "localhost,", "-c", "local"],
                          cwd=project, env=venv_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_piped_script_runs_the_script_with_its_words(tmp_path, project, venv_env):
    results, marker, _stdout = run(tmp_path, project, venv_env)
    detached = json.loads(results["detached"]["stdout"])
    os.kill(detached["child"], signal.SIGKILL)
    assert results["detached"]["rc"] == 0 and detached["argv"] == ["detach"]
    words = results["words"]
    assert words["rc"] == 0 and words["changed"] and not words.get("failed")
    assert json.loads(words["stdout"]) == {"argv": ["a b", f"$(touch {marker})", "it's", "3"],
                                           "env": "x y", "child": None}
    assert not marker.exists()
    failing = results["failing"]
    assert failing["failed"] and failing["rc"] == 3 and "exited 3" in failing["msg"]


def test_piped_script_runs_nothing_in_check_mode(tmp_path, project, venv_env):
    results, _marker, _stdout = run(tmp_path, project, venv_env, "--check")
    for name in ("words", "failing", "detached"):
        assert results[name].get("skipped") and "rc" not in results[name], name


STEPS_PLAYBOOK = textwrap.dedent("""\
    - name: piped_script steps
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: Two scripts in one exchange, each with its words and environment
          flagperf.benchmark.piped_script:
            steps:
              - script: echo_args.py
                argv: [first, "a b"]
                environment: {{PIPED_SCRIPT_TEST: one}}
              - script: echo_args.py
                argv: [second, "$(touch {marker})"]
            executable: "{{{{ ansible_playbook_python }}}}"
          environment:
            PIPED_SCRIPT_TEST: task
          register: both

        - name: A failing step stops the later ones
          flagperf.benchmark.piped_script:
            steps:
              - script: echo_args.py
                argv: [first]
                environment: {{PIPED_SCRIPT_EXIT: "4"}}
              - script: echo_args.py
                argv: [second]
            executable: "{{{{ ansible_playbook_python }}}}"
          register: stopped
          ignore_errors: true

        - name: Unless keep_going
          flagperf.benchmark.piped_script:
            steps:
              - script: echo_args.py
                argv: [first]
                environment: {{PIPED_SCRIPT_EXIT: "4"}}
              - script: echo_args.py
                argv: [second]
                environment: {{PIPED_SCRIPT_EXIT: "5"}}
              - script: echo_args.py
                argv: [third]
            keep_going: true
            executable: "{{{{ ansible_playbook_python }}}}"
          register: kept_going
          ignore_errors: true

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{{{ {{'both': both, 'stopped': stopped, 'kept_going': kept_going}} | to_json }}}}"
            dest: "{out}"
            mode: "0644"
""")


def test_steps_run_one_after_the_other_in_one_task(tmp_path, project, venv_env):
    results = play(tmp_path, project, venv_env, STEPS_PLAYBOOK, {"echo_args.py": SCRIPT})
    marker = tmp_path / "expanded"
    both = results["both"]
    assert both["rc"] == 0 and not both.get("failed")
    # Each step's own words; its environment over the task's for that step only.
    assert [json.loads(line) for line in both["stdout_lines"]] == [
        {"argv": ["first", "a b"], "env": "one", "child": None},
        {"argv": ["second", f"$(touch {marker})"], "env": "task", "child": None}]
    assert not marker.exists()
    stopped = results["stopped"]
    assert stopped["failed"] and stopped["rc"] == 4
    assert [json.loads(line)["argv"] for line in stopped["stdout_lines"]] == [["first"]]
    assert stopped["msg"] == "step 1 (echo_args.py) exited 4"
    kept = results["kept_going"]
    assert kept["failed"] and kept["rc"] == 4 and kept["msg"] == "step 1 (echo_args.py) exited 4"
    assert [json.loads(line)["argv"] for line in kept["stdout_lines"]] == [["first"], ["second"], ["third"]]
    assert "step 2 (echo_args.py) exited 5" in kept["stderr"]


PROBE = textwrap.dedent("""\
    import json, os, sys
    mode = sys.argv[1]
    if mode == "fork":
        child = os.fork()
        if child == 0:
            sys.exit(0)  # returns into the runner instead of os._exit: must end there
        os.waitpid(child, 0)
    if mode == "exit-message":
        sys.exit("a message")
    with open("/proc/self/cmdline", "rb") as handle:
        cmdline = handle.read().decode().rstrip("\\0").split("\\0")
    print(json.dumps({"mode": mode, "stdin": sys.stdin.read(), "pid": os.getpid(),
                      "name": __name__, "env": os.environ.get("PIPED_SCRIPT_TEST"),
                      "cmdline": cmdline}))
""")

ONE_INTERPRETER_PLAYBOOK = textwrap.dedent("""\
    - name: piped_script steps in one interpreter
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: A forking step, then steps reading standard input
          flagperf.benchmark.piped_script:
            steps:
              - script: probe.py
                argv: [fork]
              - script: probe.py
                argv: [stdin]
                environment: {{PIPED_SCRIPT_TEST: two}}
              - script: probe.py
                argv: [stdin]
            executable: "{{{{ ansible_playbook_python }}}}"
          register: probed

        - name: A step's exit message, as the interpreter prints it
          flagperf.benchmark.piped_script:
            steps:
              - script: probe.py
                argv: [exit-message]
              - script: probe.py
                argv: [after]
            keep_going: true
            executable: "{{{{ ansible_playbook_python }}}}"
          register: message
          ignore_errors: true

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{{{ {{'probed': probed, 'message': message}} | to_json }}}}"
            dest: "{out}"
            mode: "0644"
""")


def test_steps_share_one_interpreter_as_if_each_ran_alone(tmp_path, project, venv_env):
    results = play(tmp_path, project, venv_env, ONE_INTERPRETER_PLAYBOOK, {"probe.py": PROBE})
    lines = [json.loads(line) for line in results["probed"]["stdout_lines"]]
    # The forked child that returned ran no later step: each step printed once.
    assert [line["mode"] for line in lines] == ["fork", "stdin", "stdin"]
    # One interpreter; each step in a __main__ of its own, reading nothing from standard input
    # (the runner's input held the scripts), with its own environment only while it runs.
    assert len({line["pid"] for line in lines}) == 1
    assert all(line["name"] == "__main__" and line["stdin"] == "" for line in lines)
    assert [line["env"] for line in lines] == [None, "two", None]
    # What runs shows in ps: each step's script name and words follow the runner's program.
    assert lines[0]["cmdline"][-6:] == ["probe.py", "fork", "probe.py", "stdin", "probe.py", "stdin"]
    message = results["message"]
    assert message["failed"] and message["rc"] == 1
    assert message["msg"] == "step 1 (probe.py) exited 1"
    assert "a message" in message["stderr"]
    assert [json.loads(line)["mode"] for line in message["stdout_lines"]] == ["after"]


RUN_INPUT = textwrap.dedent("""\
    import json, os, subprocess, sys
    # The step's standard input runs as a program, as flagperf_host.node_job start --input runs it.
    done = subprocess.run([sys.executable, "-"], stdin=0, capture_output=True, text=True)
    print(json.dumps({"rc": done.returncode, "result": json.loads(done.stdout or "null"),
                      "stdin": os.readlink("/proc/self/fd/0")}))
""")

INPUT_PLAYBOOK = textwrap.dedent("""\
    - name: piped_script steps with a module's payload as input
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: A step runs a module given as its input; the next reads nothing
          flagperf.benchmark.piped_script:
            steps:
              - script: run_input.py
                input_module:
                  name: ansible.builtin.ping
                  args: {{data: "it's {{{{ 'templated' }}}}"}}
              - script: run_input.py
                input_module:
                  name: ansible.builtin.ping
                  args: {{data: "{{{{ omit }}}}"}}
              - script: probe.py
                argv: [stdin]
            executable: "{{{{ ansible_playbook_python }}}}"
          register: ran

        - name: An input that is not a module's name and arguments
          flagperf.benchmark.piped_script:
            steps:
              - script: probe.py
                argv: [stdin]
                input_module: ansible.builtin.ping
            executable: "{{{{ ansible_playbook_python }}}}"
          register: malformed
          ignore_errors: true

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{{{ {{'ran': ran, 'malformed': malformed}} | to_json }}}}"
            dest: "{out}"
            mode: "0644"
""")


def test_a_step_gets_a_modules_payload_as_its_input(tmp_path, project, venv_env):
    results = play(tmp_path, project, venv_env, INPUT_PLAYBOOK,
                   {"run_input.py": RUN_INPUT, "probe.py": PROBE})
    first, second, third = [json.loads(line) for line in results["ran"]["stdout_lines"]]
    # The module ran with the task's templated arguments; omit dropped one (ping's default).
    assert first["rc"] == 0 and first["result"]["ping"] == "it's templated"
    assert second["rc"] == 0 and second["result"]["ping"] == "pong"
    # An unnamed temporary file: no path on the host holds the payload.
    assert first["stdin"].endswith("(deleted)"), first["stdin"]
    assert third["stdin"] == ""
    malformed = results["malformed"]
    assert malformed["failed"] and "input_module must be a mapping of name and args" in malformed["msg"]


ARCHIVE_PLAYBOOK = textwrap.dedent("""\
    - name: piped_script steps of the host package
      hosts: localhost
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      tasks:
        - name: An entry module of the host package, then a script that imports the package
          flagperf.benchmark.piped_script:
            steps:
              - module: flagperf_host.node_job
                argv: [wait, --output-dir, "{marker}", --seconds, "0"]
              - script: where.py
            executable: /usr/bin/python3
          environment:
            PYTHONPATH: ""
          register: stepped

        - name: A module alone, as a role's task gives it
          flagperf.benchmark.piped_script:
            module: flagperf_host.node_job
            argv: [no-such-action]
            executable: /usr/bin/python3
          register: alone
          ignore_errors: true

        - name: A module outside the host package is refused before anything runs
          flagperf.benchmark.piped_script:
            module: os.path
            executable: /usr/bin/python3
          register: outside
          ignore_errors: true

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{{{ {{'stepped': stepped, 'alone': alone, 'outside': outside}} | to_json }}}}"
            dest: "{out}"
            mode: "0644"
""")

WHERE = textwrap.dedent("""\
    import json, sys
    import flagperf_host.process
    print(json.dumps({"file": flagperf_host.process.__file__, "site": [p for p in sys.path if "site-packages" in p]}))
""")


def test_entry_modules_run_from_the_archive_the_task_sends(tmp_path, project, venv_env):
    """A module step runs from the host package's archive held in memory by the host's own
    Python (the system one, no site packages of ours): nothing of the package on its disk."""
    results = play(tmp_path, project, venv_env, ARCHIVE_PLAYBOOK, {"where.py": WHERE})
    waited, where = results["stepped"]["stdout_lines"]
    # node_job's report on a folder no case ever ran in: its supervisor is gone.
    assert json.loads(waited)["finished"] == 1 and "supervisor is gone" in json.loads(waited)["msg"]
    found = json.loads(where)["file"]
    assert found.startswith("/dev/fd/") and found.endswith("/flagperf_host/process.py")
    alone = results["alone"]
    assert alone["failed"] and alone["rc"] == 2 and "invalid choice: 'no-such-action'" in alone["stderr"]
    assert alone["msg"] == "flagperf_host.node_job exited 2"
    outside = results["outside"]
    assert outside["failed"] and "rc" not in outside
    assert outside["msg"] == "module must be a module of flagperf_host, got 'os.path'"
