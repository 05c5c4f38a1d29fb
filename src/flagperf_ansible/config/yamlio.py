"""Reading YAML configuration: safe loading only, errors as one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flagperf_ansible.config.errors import ConfigError


#: Byte-order marks that start a file saved as UTF-16 or UTF-32 (little or big endian).
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = "\ufeff"


def utf8_text(data: bytes, shown: str) -> str:
    """``data`` decoded as plain UTF-8, as Ansible requires of inventories and vars files; a
    file saved as UTF-16 (an editor's "Unicode") or carrying a byte-order mark, which in the
    middle of a file (two files joined) hides the key after it, is refused.

    Raises:
        ConfigError: naming ``shown`` (the file), and the line of a stray byte or mark.
    """
    if data.startswith(_WIDE_BOMS):
        raise ConfigError("saved as UTF-16 or UTF-32: save it as UTF-8 text", shown)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{data[error.start]:02x} at line {line}): "
                          "save it as UTF-8", shown) from None
    if _UTF8_BOM in text:
        line = text[:text.index(_UTF8_BOM)].count("\n") + 1
        raise ConfigError(f"a byte-order mark (U+FEFF) at line {line} (two files joined?): "
                          "save it as UTF-8 without one", shown)
    return text


def read_yaml(path: Path, project: Path | None = None) -> Any:
    """Load a YAML file (plain UTF-8, ``utf8_text``), raising ``ConfigError`` naming the file
    on a syntax error, an encoding other than UTF-8, or a file that cannot be read."""
    shown = str(path.relative_to(project)) if project and path.is_relative_to(project) else str(path)
    try:
        text = utf8_text(path.read_bytes(), shown)
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{problem}", shown) from None
    except OSError as err:
        raise ConfigError(err.strerror or str(err), shown) from None
