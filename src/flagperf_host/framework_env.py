"""Make one framework's virtual environment on this host, once: ``--path`` holds a venv with
``--requirements`` (and the lines of ``--extra-json``) installed, made by this interpreter.

The path names the environment's content (the run plan puts a hash of the requirements in
it), so an environment that exists is the right one and is left alone: its marker file
``.flagperf-env-complete`` is written last, after pip succeeded. Hosts that share a file
system (an NFS home, loopback hosts) make it once: an exclusive lock on ``<path>.lock`` is held
while it is made (a folder without the marker, left by an interrupted make, is made anew).
Standard library only;
prints one JSON line ``{"python": <path>/bin/python, "changed": bool}``. Exits 1 with pip's
last lines on stderr when the install fails (nothing is left at ``--path``).
"""

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys

MARKER = ".flagperf-env-complete"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="framework_env", description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="the environment's folder")
    parser.add_argument("--requirements", required=True, help="a pip requirements file")
    parser.add_argument("--extra-json", default="[]",
                        help="more requirement lines (the cases' own packages), a JSON list")
    parser.add_argument("--index-url", default="")
    parser.add_argument("--extra-index-url", default="")
    parser.add_argument("--cert", default="", help="CA bundle pip trusts")
    args = parser.parse_args(argv)
    path = args.path.rstrip("/")
    python = os.path.join(path, "bin", "python")
    changed = False
    if not os.path.isfile(os.path.join(path, MARKER)):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.isfile(os.path.join(path, MARKER)):  # not made meanwhile
                make(path, args)
                changed = True
    print(json.dumps({"python": python, "changed": changed}))
    return 0


def make(path, args):
    shutil.rmtree(path, ignore_errors=True)  # an interrupted make: no marker in it
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    pip = [os.path.join(path, "bin", "python"), "-m", "pip", "install",
           "--disable-pip-version-check", "--no-input", "-r", args.requirements,
           *json.loads(args.extra_json)]
    env = dict(os.environ)
    for name, value in (("PIP_INDEX_URL", args.index_url),
                        ("PIP_EXTRA_INDEX_URL", args.extra_index_url), ("PIP_CERT", args.cert)):
        if value:
            env[name] = value
    done = subprocess.run(pip, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        tail = done.stdout.decode(errors="replace").strip().splitlines()[-15:]
        sys.stderr.write("pip install -r %s failed:\n%s\n" % (args.requirements, "\n".join(tail)))
        sys.exit(1)
    with open(os.path.join(path, MARKER), "w") as marker:
        marker.write("\n")


if __name__ == "__main__":
    sys.exit(main())
