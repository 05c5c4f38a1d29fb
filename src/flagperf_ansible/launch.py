"""Command lines and names for launching a round: one home for host processes and containers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping


def launch_argv(round_: Mapping[str, Any], noderank: int, python: str, root: str,
                output_dir: str, data_dir: str, master_port: int) -> list[str]:
    """The argv that starts one node of a round.

    ``torchrun`` cases: ``python -m torch.distributed.run --nproc_per_node P`` then
    ``--standalone`` on one node, else ``--nnodes N --node_rank R --master_addr A
    --master_port M`` (static rendezvous on noderank 0). ``python`` cases (diagnostic): the entry
    alone, one process per node, its rank given by ``launch_env``. Every case gets
    ``--config <output_dir>/config.yaml --output_dir <output_dir> --data_dir <data_dir>``.
    No shell is involved: each value is one argv element.
    """
    case_args = [f"{root}/{round_['entry']}", "--config", f"{output_dir}/config.yaml",
                 "--output_dir", output_dir, "--data_dir", data_dir]
    if round_["launcher"] != "torchrun":
        return [python, *case_args]
    argv = [python, "-m", "torch.distributed.run", "--nproc_per_node",
            str(round_["nproc_per_node"])]
    if int(round_["nnodes"]) == 1:
        argv.append("--standalone")
    else:
        argv += ["--nnodes", str(round_["nnodes"]), "--node_rank", str(noderank),
                 "--master_addr", str(round_["master_addr"]), "--master_port", str(master_port)]
    return argv + case_args


def launch_env(round_: Mapping[str, Any], noderank: int, master_port: int,
               extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Environment of a round's processes: torchrun sets ranks itself; the plain launcher gets
    ``RANK`` = noderank, ``WORLD_SIZE`` = nnodes. ``extra`` (``flagperf_env``) comes last."""
    env = {"PYTHONUNBUFFERED": "1"}
    if round_["launcher"] != "torchrun":
        env.update({"RANK": str(noderank), "LOCAL_RANK": "0", "WORLD_SIZE": str(round_["nnodes"]),
                    "MASTER_ADDR": str(round_["master_addr"]), "MASTER_PORT": str(master_port)})
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def image_tag(project: Path, vendor: str, framework: str, inputs: Mapping[str, Any]) -> str:
    """Content hash of an image's build inputs: every file under
    ``vendors/<vendor>/docker_image/<framework>/`` (path and bytes) and ``inputs`` (base image,
    wheel names, pip settings) as JSON. 16 hex digits of SHA-256: a changed input gives a new
    tag (a rebuild), unchanged inputs the same tag (no rebuild).

    Raises:
        FileNotFoundError: the vendor has no image definition for the framework.
    """
    folder = project / "vendors" / vendor / "docker_image" / framework
    if not (folder / "Dockerfile").is_file():
        raise FileNotFoundError(f"{folder.relative_to(project)}/Dockerfile: no image definition")
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(json.dumps(dict(inputs), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def container_name(run_id: str, case_id: str, round_no: int, noderank: int) -> str:
    """``flagperf-<run_id>-<case_id>-r<k>-n<i>``: unique per run, round and node."""
    return f"flagperf-{run_id}-{case_id}-r{round_no}-n{noderank}"
