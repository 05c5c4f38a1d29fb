"""The vendor images without guesswork: ``flagperf-ansible image base`` (its arguments and its
one-line refusals), the pip index settings, and what the image_build role hands to the
Dockerfile (a real build of the cpu Dockerfile against a package index served here)."""

import base64
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

from flagperf_ansible import cli
from flagperf_ansible.run import base_image
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.settings import check_settings
from unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles/image_build"
NEVER = "flagperf-base:test-never-made"


def engine_running() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True).returncode == 0


def cli_run(*args: str, env: dict | None = None, user: str | None = None):
    """``python -m flagperf_ansible image base ARGS`` in a process of its own (as ``user``)."""
    argv = [sys.executable, "-m", "flagperf_ansible", "image", "base", *args]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    env = {**(env if env is not None else os.environ), "PYTHONPATH": str(ROOT / "src"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/")


def test_default_name_is_flagperf_base_image_default():
    defaults = yaml.safe_load((ROOT / "roles/flagperf/defaults/main.yml").read_text())
    assert base_image.default_name() == defaults["flagperf_base_image"] == "flagperf-base:bookworm"
    assert base_image.default_name("trixie") == "flagperf-base:trixie"


@pytest.mark.parametrize("args, key, message", [
    (["--name", "Flagperf Base"], "--name", "is not an image reference"),
    (["--name", "base;id"], "--name", "is not an image reference"),
    (["--suite", "../etc"], "--suite", "is not a Debian suite"),
    (["--suite", "Bookworm"], "--suite", "is not a Debian suite"),
    (["--mirror", "ftp://deb.debian.org/debian"], "--mirror", "is not a mirror URL"),
    (["--mirror", "http://deb.debian.org/$(id)"], "--mirror", "is not a mirror URL"),
])
def test_image_base_refuses_bad_arguments(args, key, message, capsys):
    """Checked before anything else: exit 2 and one line naming the option."""
    assert cli.main(["image", "base", *args]) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"flagperf-ansible: command line: {key}: ") and message in err


def test_image_needs_a_subcommand(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["image"])
    assert exited.value.code == 2
    assert "base" in capsys.readouterr().err


def test_image_base_accepts_its_options():
    args = cli._parser().parse_args(["image", "base", "--name", "flagperf-base:verify",
                                     "--suite", "trixie", "--mirror", "http://ftp.de.debian.org/debian"])
    assert (args.name, args.suite, args.mirror) == (
        "flagperf-base:verify", "trixie", "http://ftp.de.debian.org/debian")
    defaults = cli._parser().parse_args(["image", "base"])
    assert (defaults.name, defaults.suite, defaults.mirror) == (None, "bookworm", None)
    for mirror in ("https://deb.debian.org/debian/", "file:///srv/mirror/debian",
                   "http://10.0.0.5:3142/debian"):
        assert base_image.MIRROR_PATTERN.fullmatch(mirror), mirror


def test_image_base_without_debootstrap_says_so(tmp_path):
    """A PATH without debootstrap: exit 2, one line, nothing made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "tar"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    done = cli_run("--name", NEVER, env={**os.environ, "PATH": str(bin_dir)})
    assert done.returncode == cli.EXIT_INPUT, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("flagperf-ansible: image base: cannot make it here: ")
    assert "no debootstrap on PATH (apt-get install debootstrap)" in done.stderr
    if engine_running():
        assert not base_image.image_exists(NEVER)


def as_nobody(*args: str) -> tuple[int, str]:
    """``flagperf-ansible image base ARGS`` as user ``nobody``: (exit status, stderr).

    With runuser where ``nobody`` may run this Python; otherwise (a Python under /root) in a
    forked child that drops to ``nobody`` with the modules the command needs already loaded."""
    probe = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "pass"],
                           capture_output=True)
    if probe.returncode == 0:
        done = cli_run(*args, user="nobody")
        return done.returncode, done.stderr
    import pwd

    import flagperf_ansible.datasets  # noqa: F401  (what cli.main imports, loaded as root)
    import flagperf_ansible.config.settings  # noqa: F401

    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        code = 99
        try:
            os.close(read)
            sys.stderr = os.fdopen(write, "w")  # not pytest's capture
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            code = cli.main(["image", "base", *args])
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), err


def test_image_base_not_root_says_so():
    """As ``nobody`` (or whoever runs the tests, when not root): exit 2, one line."""
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            unavailable("no runuser to drop root (util-linux)")
        code, err = as_nobody("--name", NEVER)
    else:
        done = cli_run("--name", NEVER)
        code, err = done.returncode, done.stderr
    assert code == cli.EXIT_INPUT, err
    assert err.count("\n") == 1
    assert err.startswith("flagperf-ansible: image base: cannot make it here: not root "
                          "(debootstrap chroots and makes device nodes: run it with sudo)")


def test_image_base_reports_a_failed_debootstrap_and_cleans_up(tmp_path):
    """A mirror that answers nothing: debootstrap's own error in one line, exit 1, its log
    kept and named, the temporary root file system removed, no image."""
    if base_image.problems():
        unavailable("cannot make base images here: " + "; ".join(base_image.problems()))
    done = cli_run("--name", NEVER, "--mirror", "http://127.0.0.1:9/debian",
                   env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == cli.EXIT_FAILED, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("flagperf-ansible: image base: debootstrap bookworm failed: "
                                  "E: Failed getting release file http://127.0.0.1:9/debian/")
    logs = list(tmp_path.glob("flagperf-base-debootstrap-*.log"))
    assert [p.name for p in tmp_path.iterdir()] == [logs[0].name]
    assert f"(its log: {logs[0]})" in done.stderr
    assert not base_image.image_exists(NEVER)


def test_describe_gives_time_and_size():
    assert base_image.describe(base_image.Made("flagperf-base:x", 192.4, 204_000_000)) == \
        "flagperf-base:x: made in 3 min 12 s, 204 MB"
    assert base_image.describe(base_image.Made("flagperf-base:x", 41, 5e8)) == \
        "flagperf-base:x: made in 41 s, 500 MB"


# --- The pip index settings and the role ---------------------------------------------------

def settings(**values):
    defaults = yaml.safe_load((ROOT / "roles/flagperf/defaults/main.yml").read_text())
    return {**defaults, "flagperf_cases": ["sleep:pytorch:cpu:1:1:1"], **values}


@pytest.mark.parametrize("key, value, message", [
    ("flagperf_pip_index_url", "ftp://mirror/simple", "is not an http:// or https:// package index URL"),
    ("flagperf_pip_index_url", "https://mirror/simple;id", "is not an http:// or https://"),
    ("flagperf_pip_index_url", "https://a/simple https://b/simple", "one URL only"),
    ("flagperf_pip_index_url", "https://ci:s3cret@mirror/simple", "holds credentials"),
    ("flagperf_pip_extra_index_url", "https://a/simple $(id)", "is not an http:// or https://"),
    ("flagperf_pip_extra_index_url", "https://a/simple https://u@b/simple", "holds credentials"),
])
def test_bad_index_url_is_one_line_naming_file_and_key(key, value, message):
    with pytest.raises(ConfigError) as raised:
        check_settings(settings(**{key: value}), {key: "inv/group_vars/all.yml"})
    assert str(raised.value).startswith(f"inv/group_vars/all.yml: {key}: ")
    assert message in str(raised.value)


def test_index_urls_accepted():
    parsed = check_settings(settings(
        flagperf_pip_index_url="http://devpi.lab:3141/root/pypi/+simple/",
        flagperf_pip_extra_index_url="https://download.pytorch.org/whl/cpu https://x.example/simple"),
        {})
    assert parsed.flagperf_pip_index_url == "http://devpi.lab:3141/root/pypi/+simple/"
    assert check_settings(settings(), {}).flagperf_pip_index_url == ""


def render_build_args(tmp_path, venv_env, **values) -> dict:
    """The build arguments the role computes (its vars/main.yml over its defaults), as
    ansible-playbook renders them."""
    out = tmp_path / "args.json"
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the build arguments", "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": [{"name": "Write them", "ansible.builtin.copy": {
            "content": "{{ _image_build_args | to_json }}", "dest": str(out), "mode": "0644"}}],
    }]))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter={{ ansible_playbook_python }}",
                           "-e", json.dumps(values)], cwd=ROOT, env=venv_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    return json.loads(out.read_text())


def test_role_hands_the_index_urls_as_build_args(tmp_path, venv_env):
    assert render_build_args(tmp_path, venv_env) == {"BASE_IMAGE": "flagperf-base:bookworm"}
    assert render_build_args(
        tmp_path, venv_env, image_build_base_image="flagperf-base:verify",
        image_build_pip_index_url="http://devpi.lab:3141/root/pypi/+simple/",
        image_build_pip_extra_index_url="https://download.pytorch.org/whl/cpu  http://10.0.0.5/simple",
    ) == {"BASE_IMAGE": "flagperf-base:verify",
          "PIP_INDEX_URL": "http://devpi.lab:3141/root/pypi/+simple/",
          "PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu http://10.0.0.5/simple",
          # Only the http:// ones: pip checks https certificates as ever.
          "PIP_TRUSTED_HOST": "devpi.lab:3141 10.0.0.5"}
    # ... and those are what the build task passes to community.docker.
    tasks = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    builds = [task for block in tasks for task in block.get("block", [block])
              if "community.docker.docker_image" in task]
    assert [b["community.docker.docker_image"]["build"]["args"] for b in builds] == [
        "{{ _image_build_args }}"]


def test_role_refuses_credentials_in_index_urls(tmp_path, venv_env):
    """The role alone (as a collection's) checks them before touching Docker."""
    playbook = tmp_path / "build.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Build", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Build", "ansible.builtin.import_role": {"name": "image_build"},
                   "vars": {"image_build_pip_index_url": "https://ci:s3cret@mirror/simple"}}]}]))
    done = subprocess.run(["ansible-playbook", str(playbook), "-i", "localhost,", "--check",
                           "-c", "local"], cwd=ROOT, env=venv_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "Check the package index URLs" in done.stdout
    assert "without credentials" in done.stdout


def probe_wheel(folder: Path) -> Path:
    """A pure-Python wheel ``flagperf_index_probe`` 1.0 that only the test's index serves."""
    name, version = "flagperf_index_probe", "1.0"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"SERVED_BY = 'the test index'\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in {**files, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return wheel


@pytest.mark.usefixtures("base_image")   # the fixture; this module's base_image is the module
def test_cpu_dockerfile_installs_from_the_index_url(tmp_path, venv_env):
    """The role builds the cpu vendor's Dockerfile (its requirements cut to one package that only
    an index served here has) with image_build_pip_index_url: pip in the build used it, and the
    image's environment does not keep it."""
    index = tmp_path / "index"
    project = index / "simple" / "flagperf-index-probe"
    project.mkdir(parents=True)
    probe_wheel(project)  # http.server's folder listing is a simple index page (PEP 503)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=index))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/simple/"

    definition = tmp_path / "definition"
    definition.mkdir()
    shutil.copy(ROOT / "vendors/cpu/docker_image/pytorch/Dockerfile", definition / "Dockerfile")
    (definition / "requirements.txt").write_text("flagperf-index-probe==1.0\n")
    image = f"flagperf-index-probe:{os.getpid()}"
    playbook = tmp_path / "build.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Build", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Build", "ansible.builtin.import_role": {"name": "image_build"},
                   "vars": {"image_build_name": image.split(":")[0],
                            "image_build_tag": image.split(":")[1],
                            "image_build_definition_dir": str(definition),
                            "image_build_context_dir": str(tmp_path / "context"),
                            "image_build_pip_index_url": url}}]}]))
    try:
        done = subprocess.run(
            ["ansible-playbook", str(playbook), "-i", "localhost,", "-c", "local",
             "-e", "ansible_python_interpreter={{ ansible_playbook_python }}"],
            cwd=ROOT, env=venv_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:]
        ran = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python", "-c",
                              "import flagperf_index_probe as p, os; "
                              "print(p.SERVED_BY, os.environ.get('PIP_INDEX_URL'))"],
                             capture_output=True, text=True, timeout=120)
        assert ran.stdout.strip() == "the test index None", ran.stderr
        config = json.loads(subprocess.run(["docker", "image", "inspect", image],
                                           capture_output=True, text=True).stdout)[0]["Config"]
        assert not [e for e in config["Env"] if e.startswith("PIP_")]
        assert not (tmp_path / "context").exists()
    finally:
        server.shutdown()
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
