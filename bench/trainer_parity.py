#!/usr/bin/env python3
"""Compare a classification case (resnet50 by default) with the case as it was at an earlier
commit, side by side in the same run: for resnet50, 8513f15 had its own 100-line loop, ccdb7b7
(the default) ran on the driver's trainer with transformers' ResNet-50 and its own image loader;
now it is torchvision's model and data.

    python bench/trainer_parity.py [--model resnet50] [--data-dir DIR] [--rounds 1] [--commit ccdb7b7]

The old case (``benchmarks/`` and the ``src/`` that reads its configuration) is taken from git
at ``--commit`` (``git archive``) into a temporary folder; the new one is this checkout's. Each
runs its own ``cpu`` profile's effective configuration (hardware ``cpu``, vendor ``cpu``, 1 node
x 1 process: that tree's ``flagperf_ansible.config.cases.effective_config``) on the digits data
(``flagperf-ansible data prepare digits DIR``; written to a temporary folder when
``--data-dir`` is not given), one process each, directly (no torchrun, no vendor hooks),
alternating old then new for ``--rounds`` rounds. Figures per case (medians over rounds):

* ``wall``: the process's wall time, start to exit (s);
* ``e2e_time``, ``p_whole``, ``p_train``, ``p_core``, ``final_acc1``, ``epochs``,
  ``num_trained_samples``: FINISHED's values (s, samples/s, %);

with ``new/old`` beside each. Where the recipe did not change (8513f15), the loss curve and
final top-1 should match bit for bit on the same machine and the throughputs differ by no more
than run-to-run noise; across a change of model or data pipeline (ccdb7b7) the figures say what
it cost or gained. It prints figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from flagperf_ansible.results.perflog import parse_rank_log  # noqa: E402

#: A case folder, relative to a tree, is ``benchmarks/<model>/pytorch``; a tree from before cases
#: ran through ``python -m driver.run`` has its own entry script there.
CASES = Path("benchmarks")
FIGURES = ("wall", "e2e_time", "p_whole", "p_train", "p_core", "final_acc1", "epochs",
           "num_trained_samples")


def extract_old_tree(commit: str, target: Path) -> Path:
    """``benchmarks/``, ``vendors/`` and ``src/`` at ``commit`` under ``target``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "benchmarks", "vendors",
         "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


#: Run in the tree's own ``src``: the cpu profile's effective configuration as YAML.
CONFIG_SCRIPT = """
import sys, yaml
from pathlib import Path
from flagperf_ansible.config.cases import effective_config, load_case
from flagperf_ansible.config.casespec import CaseSpec
root = Path(sys.argv[1])
model = sys.argv[2]
spec = CaseSpec(model=model, framework="pytorch", hardware="cpu", nnodes=1, nproc_per_node=1)
effective = effective_config(root, load_case(root, model, "pytorch"), spec, "cpu")
# An EffectiveConfig now; a (config, overrides) pair in older trees.
print(yaml.safe_dump(effective.config if hasattr(effective, "config") else effective[0]))
"""


def cpu_profile_config(root: Path, model: str) -> str:
    """The ``model`` case's cpu profile's effective configuration of the tree at ``root``
    (YAML)."""
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([sys.executable, "-c", CONFIG_SCRIPT, str(root), model], env=env,
                          check=True, capture_output=True, text=True).stdout


def run_case(root: Path, case: Path, config: Path, data_dir: Path, output_dir: Path) -> dict:
    """Run the tree's case process (its ``run_pretraining.py`` where it has one, else
    ``python -m driver.run --case``); FINISHED's values and its wall time."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "FLAGPERF_VENDOR_DIR")}
    entry = root / case / "run_pretraining.py"
    if entry.is_file():
        script = [str(entry)]
    else:
        script = ["-m", "driver.run", "--case", str(root / case)]
        env["PYTHONPATH"] = f"{root / 'benchmarks'}:{root / 'src'}"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *script, "--config", str(config), "--output_dir",
                           str(output_dir), "--data_dir", str(data_dir)],
                          env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    log = output_dir / "rank0.out.log"
    finished = parse_rank_log(log).finished if log.is_file() else None
    if done.returncode != 0 or finished is None:
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else done.stderr[-3000:]
        raise RuntimeError(f"{root / case} ended with status {done.returncode}:\n{tail}")
    return {"wall": wall, **finished}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50",
                        help="a pytorch case that trains on the digits data (resnet50, vit, ...)")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--commit", default="ccdb7b7")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data_dir = args.data_dir
        if data_dir is None:
            from flagperf_ansible.datasets.imagenet import generate as prepare_digits

            data_dir = work / "digits"
            prepare_digits(data_dir)
        case = CASES / args.model / "pytorch"
        roots = {"old": extract_old_tree(args.commit, work / "old"), "new": ROOT}
        configs = {}
        for name, root in roots.items():
            configs[name] = work / f"{name}-config.yaml"
            configs[name].write_text(cpu_profile_config(root, args.model))
        results: dict[str, list[dict]] = {name: [] for name in roots}
        for round_ in range(1, args.rounds + 1):
            for name, root in roots.items():
                results[name].append(run_case(root, case, configs[name], data_dir,
                                              work / f"{name}-round{round_}"))
                print(f"round {round_} {name}: done in {results[name][-1]['wall']:.1f} s",
                      flush=True)

    print(f"\n{args.model} cpu profile, 1 process, {args.rounds} round(s) each, medians; "
          f"old = {args.commit}'s case, new = this checkout's; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'figure':<20} {'old':>12} {'new':>12} {'new/old':>8}")
    for figure in FIGURES:
        old = statistics.median(float(r[figure]) for r in results["old"])
        new = statistics.median(float(r[figure]) for r in results["new"])
        ratio = f"{new / old:.3f}" if old else "-"
        print(f"{figure:<20} {old:>12.3f} {new:>12.3f} {ratio:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
