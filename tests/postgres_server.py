"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries (``initdb``,
``pg_ctl``) run as an ordinary user (``postgres`` when the tests run as root: the server
refuses root), a cluster in a temporary folder, listening on a unix socket in that folder
only (no TCP port, so that it collides with nobody's). ``.ci/run`` installs the package.

``start()`` returns a ``Server``; ``Server.new_database()`` gives the SQLAlchemy URL of a fresh,
empty database; ``Server.stop()`` stops the server (``pg_ctl stop -m fast``) and removes the
folder.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from unavailable import unavailable

#: The ordinary user that runs the server when the tests run as root.
SERVER_USER = "postgres"


def binaries() -> Path:
    """The folder of ``initdb`` and ``pg_ctl`` (the newest of Debian's), or the test is
    skipped (a failure under CI, which installs them)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb") and shutil.which("pg_ctl"):
        return Path(shutil.which("initdb")).parent
    unavailable("no PostgreSQL server here (apt-get install postgresql; .ci/run installs it)")


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        unavailable(f"no user {SERVER_USER} to run PostgreSQL as (the postgresql package "
                    "creates it)")
    return ["runuser", "-u", SERVER_USER, "--", *command]


@dataclass
class Server:
    """A running server: its folder (``data/`` the cluster, the socket beside it)."""

    folder: Path
    bin_dir: Path
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def socket_dir(self) -> Path:
        return self.folder

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` (psycopg 3, over the unix socket)."""
        return f"postgresql+psycopg://{SERVER_USER}@/{database}?host={self.socket_dir}"

    def new_database(self) -> str:
        """Create an empty database; returns its URL."""
        import psycopg

        name = f"flagperf_test_{next(self._names)}"
        with psycopg.connect(host=str(self.socket_dir), user=SERVER_USER, dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(_as_server_user([str(self.bin_dir / "pg_ctl"), "stop", "-m", "fast",
                                        "-D", str(self.folder / "data")]),
                       capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Server:
    """initdb a cluster in a new temporary folder and start it (about 3 s)."""
    bin_dir = binaries()
    folder = Path(tempfile.mkdtemp(prefix="flagperf-pg-"))
    if os.geteuid() == 0:
        _as_server_user([])                       # skipped without the user
        user = pwd.getpwnam(SERVER_USER)
        os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o700)
    data = folder / "data"
    server = Server(folder, bin_dir)
    try:
        done = subprocess.run(_as_server_user([
            str(bin_dir / "initdb"), "-D", str(data), "-U", SERVER_USER, "--auth=trust",
            "-E", "UTF8", "--no-sync"]), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        # No TCP (listen_addresses ''): the socket in the private folder is the only way in.
        options = f"-c listen_addresses='' -c unix_socket_directories='{folder}' -c fsync=off"
        done = subprocess.run(_as_server_user([
            str(bin_dir / "pg_ctl"), "start", "-w", "-D", str(data), "-l",
            str(folder / "server.log"), "-o", options]), capture_output=True, text=True,
            timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr + _log(folder)
    except BaseException:
        server.stop()
        raise
    return server


def _log(folder: Path) -> str:
    try:
        return (folder / "server.log").read_text()[-2000:]
    except OSError:
        return ""
