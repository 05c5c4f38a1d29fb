"""The host-side package ``flagperf_host`` as one zip archive, as it travels to the hosts.

``flagperf.benchmark.piped_script`` sends the archive with a step that runs one of the package's
entry modules (Ansible's AnsiballZ does the same with a module and its ``module_utils``). The
archive holds the package's ``.py`` files only, in sorted order with fixed times and modes, so
the same sources give the same bytes and the same SHA-256 on every controller.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import flagperf_host

PACKAGE_DIR = Path(flagperf_host.__file__).resolve().parent
#: The earliest time a zip entry can carry: no checkout's file times leak into the bytes.
_ENTRY_TIME = (1980, 1, 1, 0, 0, 0)

_built: dict[tuple, tuple[bytes, str]] = {}


def sources(package_dir: Path = PACKAGE_DIR) -> list[tuple[str, Path]]:
    """``(name in the archive, file)`` for each ``.py`` file of the package, sorted by name
    (``flagperf_host/readers/hdf5.py``)."""
    found = [(f"{package_dir.name}/{path.relative_to(package_dir).as_posix()}", path)
             for path in package_dir.rglob("*.py") if "__pycache__" not in path.parts]
    return sorted(found)


def archive(package_dir: Path = PACKAGE_DIR) -> tuple[bytes, str]:
    """The archive's bytes and their SHA-256 (hex), built again only when a source file's size
    or modification time changed since the last call in this process.

    Raises:
        OSError: a source file cannot be read.
    """
    files = sources(package_dir)
    key = tuple((name, path.stat().st_mtime_ns, path.stat().st_size) for name, path in files)
    if key not in _built:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name, path in files:
                entry = zipfile.ZipInfo(name, _ENTRY_TIME)
                entry.external_attr = 0o644 << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                bundle.writestr(entry, path.read_bytes())
        data = buffer.getvalue()
        _built.clear()
        _built[key] = (data, hashlib.sha256(data).hexdigest())
    return _built[key]


def write(folder: Path, package_dir: Path = PACKAGE_DIR) -> Path:
    """Write the archive into ``folder`` as ``flagperf_host-<first 16 hex of its SHA-256>.zip``
    (kept when already there: the name is its content) and return its path. With the archive
    on ``sys.path`` (``PYTHONPATH``), ``python3 -m flagperf_host.<entry>`` runs an entry module
    as a host does.

    Raises:
        OSError: ``folder`` cannot be written.
    """
    data, digest = archive(package_dir)
    path = Path(folder) / f"flagperf_host-{digest[:16]}.zip"
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
