"""Command line: ``flagperf-ansible`` / ``python -m flagperf_ansible``.

Exit status: 0 when every case passed (or the command succeeded), 1 when a case failed or
``compare`` found a significant regression, 2 on bad input (one line naming the file and key), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flagperf_ansible import __version__
from flagperf_ansible.config.errors import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


#: ``--case`` of run and validate.
CASE_HELP = ("this case instead of flagperf_cases: model:framework[:suite]:hardware:nnodes:"
             "nproc:repeat[=DATA_DIR] (the keys `cases` lists, then hardware and counts; "
             "DATA_DIR relative to flagperf_root); repeatable")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flagperf-ansible", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="validate, then run every case round and summarise")
    _ansible_arguments(run)
    run.add_argument("--case", action="append", metavar="SPEC", help=CASE_HELP)
    run.add_argument("--results-dir", help="results folder (default: flagperf_results_dir)")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR",
                     help="continue this run folder: run only its rounds that have not passed "
                          "(earlier attempts are kept under <round>/attempts/)")
    run.add_argument("--retries", type=int, default=0, metavar="N",
                     help="run a round that did not pass up to N more times (default 0)")

    validate = sub.add_parser("validate", help="check the inventory and cases; touch no host")
    _ansible_arguments(validate)
    validate.add_argument("--case", action="append", metavar="SPEC", help=CASE_HELP)

    summarize = sub.add_parser(
        "summarize", help="parse a run's rounds again from their raw logs and records and "
                          "(re)write summary.json/.md/.html; also reads a FlagPerf results "
                          "folder (<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log)")
    summarize.add_argument("run_dir", type=Path)

    compare = sub.add_parser("compare", help="compare run B with baseline run A (Welch's t-test)")
    compare.add_argument("run_a", type=Path, help="baseline run folder")
    compare.add_argument("run_b", type=Path, help="run folder to judge")
    compare.add_argument("--tolerance", type=float, default=5.0, metavar="PCT",
                         help="a significant change worse than PCT %% is a regression "
                              "(default 5)")
    compare.add_argument("--alpha", type=float, default=0.05,
                         help="significance level of Welch's t-test (default 0.05)")
    compare.add_argument("--all", action="store_true",
                         help="also show figures that are not judged (targets, counts)")
    compare.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    compare.add_argument("--markdown", type=Path, metavar="FILE",
                         help="also write the comparison as Markdown")
    compare.add_argument("--html", type=Path, metavar="FILE",
                         help="also write the comparison as a self-contained HTML page")

    export = sub.add_parser("export", help="write a run's results in another project's layout")
    export_sub = export.add_subparsers(dest="export_command", required=True)
    speed = export_sub.add_parser(
        "speed-index", help="the speed index of every round of an LLM case (case.yml "
                            "speed_index) in the Megatron reproduction seed's layout: "
                            "index/<name>_speed (JSON) and train_log/<name> (rank 0's log, "
                            "addresses masked)")
    speed.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    speed.add_argument("--output", type=Path, metavar="DIR",
                       help="folder to write (default: RUN_DIR/speed_index)")

    results = sub.add_parser("results", help="results over time: a database of runs, a "
                                              "leaderboard site")
    results_sub = results.add_subparsers(dest="results_command", required=True)
    db_help = ("the database: a SQLite file's path or an SQLAlchemy URL, e.g. "
               "postgresql+psycopg://user@host/flagperf (default $FLAGPERF_RESULTS_DB, else "
               "results/results.db in the checkout)")
    ingest = results_sub.add_parser(
        "ingest", help="store runs in the database, once each: run folders of this project, "
                       "FlagPerf results folders, MLPerf Training logs (a file, or a folder of "
                       "result_*.txt)")
    ingest.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    ingest.add_argument("--db", help=db_help)
    site = results_sub.add_parser("site", help="write the leaderboard site (static files) into "
                                               "OUT_DIR")
    site.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    site.add_argument("--db", help=db_help)
    serve = results_sub.add_parser("serve", help="write the site and serve it over HTTP on this "
                                                 "machine until Ctrl-C")
    serve.add_argument("--db", help=db_help)
    serve.add_argument("--out", type=Path, metavar="DIR",
                       help="where the site is written (default: a temporary folder)")
    serve.add_argument("--bind", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")

    sub.add_parser("cases", help="list the standard cases")

    # Formats and their names come from the data-set registry (flagperf_ansible.datasets).
    from flagperf_ansible.datasets import names as data_format_names

    data = sub.add_parser("data", help="data-set formats: list, write tiny data, check a folder")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="list the data formats a case may name, one line each")
    prepare = data_sub.add_parser("prepare", help="write tiny data in a format's exact layout")
    prepare.add_argument("name", choices=data_format_names(), metavar="NAME",
                         help="a format of `data list` (or digits: imagenet's tiny data)")
    prepare.add_argument("target", type=Path, help="folder to write (created if missing)")
    check = data_sub.add_parser("check", help="check a folder's layout against a format; exit 1 "
                                              "and one line per problem when it does not match")
    check.add_argument("name", choices=data_format_names(), metavar="NAME",
                       help="a format of `data list`")
    check.add_argument("path", type=Path, help="the data set's folder")

    image = sub.add_parser("image", help="vendor images: make the base image they build on")
    image_sub = image.add_subparsers(dest="image_command", required=True)
    about = ("debootstrap a minimal Debian (python3, python3-venv, python3-pip, "
             "ca-certificates) into a temporary folder and docker import it: the base image of "
             "the vendor images, made without a registry (as root; needs debootstrap and a "
             "Docker engine)")
    base = image_sub.add_parser("base", help=about, description=about)
    base.add_argument("--name", help="image to create (default flagperf-base:SUITE; "
                                     "flagperf-base:bookworm is flagperf_base_image's default)")
    base.add_argument("--suite", default="bookworm", help="Debian suite (default bookworm)")
    base.add_argument("--mirror", metavar="URL",
                      help="Debian mirror, http(s):// or file:/// (default: debootstrap's, "
                           "http://deb.debian.org/debian)")
    return parser


def _ansible_arguments(parser: argparse.ArgumentParser) -> None:
    """``-i``, ``-e`` and ``--limit``, meaning what they mean to ``ansible-playbook``."""
    parser.add_argument("-i", "--inventory", action="append", required=True, metavar="SOURCE",
                        help="inventory source Ansible reads (a YAML or INI file, a folder, an "
                             "executable script, a plugin's file); repeatable")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables as ansible-playbook takes them: key=value, "
                             "YAML/JSON, or @FILE; repeatable, later ones win")
    parser.add_argument("-l", "--limit", metavar="SUBSET",
                        help="only these hosts of flagperf_hosts (an Ansible host pattern)")


def _console():
    from rich.console import Console

    return Console()


def cmd_run(args: argparse.Namespace) -> int:
    from flagperf_ansible.paths import project_dir
    from flagperf_ansible.results.report import print_summary
    from flagperf_ansible.run.runner import Wrapper, prepare

    if args.retries < 0:
        raise ConfigError("must be 0 or more", "command line", "--retries")
    if args.resume is not None and args.results_dir:
        raise ConfigError("takes the run folder's results folder; drop --results-dir",
                          "command line", "--resume")
    # Everything validate refuses is refused here, before the run's folder exists.
    prepared = prepare(project_dir(), args.inventory, args.results_dir, args.case,
                       resume=args.resume, check_data=True, extra_vars=args.extra_vars,
                       limit=args.limit)
    console = _console()
    _print_warnings(prepared.plan)
    console.print(f"run {prepared.run_id}: {len(prepared.plan['rounds'])} round(s) -> "
                  f"{prepared.run_dir}")
    wrapper = Wrapper(prepared, console, retries=args.retries)
    summary = wrapper.run()
    if summary.get("cases"):
        print_summary(summary, console)
    console.print(f"results: {prepared.run_dir}")
    if wrapper.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if summary.get("status") == "passed" else EXIT_FAILED


def _print_warnings(plan: dict) -> None:
    for warning in plan.get("warnings") or ():
        print(f"warning: {warning}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    from flagperf_ansible.paths import project_dir
    from flagperf_ansible.run.runner import prepare

    prepared = prepare(project_dir(), args.inventory, cases=args.case, check_data=True,
                       extra_vars=args.extra_vars, limit=args.limit)
    plan = prepared.plan
    cases = ", ".join(c["case_id"] for c in plan["cases"])
    _print_warnings(plan)
    print(f"{', '.join(args.inventory)}: ok: vendor {plan['vendor']}, "
          f"{len(plan['rounds'])} round(s) on {len(plan['hosts'])} host(s): {cases}")
    return EXIT_OK


def cmd_summarize(args: argparse.Namespace) -> int:
    from flagperf_ansible.results.report import print_summary
    from flagperf_ansible.results.flagperf_import import is_flagperf_layout
    from flagperf_ansible.results.report import write_summary

    if not args.run_dir.is_dir():
        raise ConfigError("no such run folder", str(args.run_dir))
    if not ((args.run_dir / "run.json").is_file() or is_flagperf_layout(args.run_dir)
            or any(args.run_dir.glob("*/round*/round.json"))):
        raise ConfigError("neither a flagperf-ansible run (run.json) nor a FlagPerf results "
                          "folder (<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log)",
                          str(args.run_dir))
    summary = write_summary(args.run_dir, reparse=True)
    print_summary(summary, _console())
    return EXIT_OK if summary["status"] == "passed" else EXIT_FAILED


def cmd_compare(args: argparse.Namespace) -> int:
    from flagperf_ansible.results.compare import comparison_html, comparison_markdown, compare_runs, \
        print_comparison
    from flagperf_ansible.results.layout import write_json, write_text

    if args.tolerance < 0:
        raise ConfigError("must be 0 or more", "command line", "--tolerance")
    if not 0 < args.alpha < 1:
        raise ConfigError("must be between 0 and 1", "command line", "--alpha")
    result = compare_runs(args.run_a, args.run_b, args.tolerance, args.alpha)
    print_comparison(result, _console(), args.all)
    if args.json:
        write_json(args.json, result)
    if args.markdown:
        write_text(args.markdown, comparison_markdown(result, args.all))
    if args.html:
        write_text(args.html, comparison_html(result, args.all))
    # Only a confirmed regression fails: an unconfirmed one rests on a single round.
    return EXIT_FAILED if result["regressions"] else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from flagperf_ansible.results.speed_index import export_run

    out = args.output or args.run_dir / "speed_index"
    for path, index in export_run(args.run_dir, out):
        print(f"{out / path}: {index['model_name']} {index['FINAL_RESULT']} {index['UNIT']}"
              f"{' (failed)' if index['JOB_FAIL_FLAG'] else ''}")
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    from flagperf_ansible.results.db.engine import connect, database_url, shown, sqlite_file

    url = database_url(args.db)
    missing = sqlite_file(url)
    if args.results_command != "ingest" and missing is not None and not missing.is_file():
        raise ConfigError("no such database: `flagperf-ansible results ingest RUN_DIR` makes it",
                          str(missing))
    engine = connect(url)
    if args.results_command == "ingest":
        from flagperf_ansible.results.db.records import read_run
        from flagperf_ansible.results.db.store import store_runs

        # Every run is read and checked before anything is stored: all of them, or none.
        records = [read_run(path) for path in args.run_dirs]
        for record, outcome in zip(records, store_runs(engine, records)):
            cases = len(record["results"])
            rounds = sum(len(r["rounds"]) for r in record["results"])
            print(f"{record['path']}: {outcome} ({record['source']} run {record['run_id']}: "
                  f"{cases} case(s), {rounds} round(s))")
        print(f"database: {shown(url)}")
        return EXIT_OK
    from flagperf_ansible.results.db.engine import migrate
    from flagperf_ansible.results.db.query import load
    from flagperf_ansible.results.leaderboard import write_site

    migrate(engine)
    data = load(engine)
    if args.results_command == "site":
        index = write_site(data, args.out_dir)
        print(f"{index}: {len(data['results'])} case result(s) from {shown(url)}")
        return EXIT_OK
    return _serve(args, data)


def _serve(args: argparse.Namespace, data: dict) -> int:
    """``results serve``: the site written once, then served until Ctrl-C or SIGTERM."""
    import functools
    import signal
    import tempfile
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from flagperf_ansible.results.leaderboard import write_site

    if not 0 <= args.port <= 65535:
        raise ConfigError("must be 0 to 65535", "command line", "--port")
    with tempfile.TemporaryDirectory(prefix="flagperf-site-") as scratch:
        out = args.out or Path(scratch)
        write_site(data, out)
        handler = functools.partial(SimpleHTTPRequestHandler, directory=str(out))
        try:
            server = ThreadingHTTPServer((args.bind, args.port), handler)
        except OSError as err:
            raise ConfigError(f"cannot listen on {args.bind}:{args.port}: {err.strerror}",
                              "command line", "--port") from None
        # Ctrl-C and SIGTERM stop it, also where SIGINT came in ignored (started with & from
        # a script, where Python keeps SIGINT ignored and sets no KeyboardInterrupt).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler)
        host, port = server.server_address[:2]
        print(f"serving {out} on http://{host}:{port}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    print("stopped", flush=True)
    return EXIT_OK


def cmd_cases(_args: argparse.Namespace) -> int:
    from flagperf_ansible.config.cases import list_cases
    from flagperf_ansible.paths import project_dir

    cases = list_cases(project_dir())
    width = max((len(c.key) for c in cases), default=0)
    for case in cases:
        print(f"{case.suite:<10}  {case.key:<{width}}  {case.spec.description}")
    print("run one: flagperf-ansible run -i INVENTORY --case KEY:HARDWARE:NNODES:NPROC:REPEAT"
          "[=DATA_DIR], e.g. --case resnet50:pytorch:inference:cpu:1:1:1=data/digits")
    return EXIT_OK


def cmd_data(args: argparse.Namespace) -> int:
    from flagperf_ansible import datasets

    if args.data_command == "list":
        known = datasets.formats()
        width = max((len(f.name) for f in known), default=0)
        for data_format in known:
            also = f" (also: {', '.join(data_format.aliases)})" if data_format.aliases else ""
            print(f"{data_format.name:<{width}}  {data_format.description}{also}")
        return EXIT_OK
    if args.data_command == "prepare":
        try:
            counts = datasets.prepare(args.name, args.target)
        except ModuleNotFoundError as err:
            raise ConfigError(f"writing {args.name} data needs {err.name}: pip install "
                              "'flagperf-ansible[local]'", "command line", "data prepare") from None
        print(f"{args.name}: {args.target}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return EXIT_OK
    problems = datasets.check(args.name, args.path)
    for problem in problems:
        print(problem)
    verdict = f"{len(problems)} problem(s)" if problems else "ok"
    print(f"{args.name}: {args.path}: {verdict}", file=sys.stderr if problems else sys.stdout)
    return EXIT_FAILED if problems else EXIT_OK


def cmd_image(args: argparse.Namespace) -> int:
    from flagperf_ansible.run import base_image
    from flagperf_ansible.config.settings import IMAGE_PATTERN

    if not base_image.SUITE_PATTERN.fullmatch(args.suite):
        raise ConfigError(f"{args.suite!r} is not a Debian suite (bookworm, trixie, ...)",
                          "command line", "--suite")
    name = args.name or base_image.default_name(args.suite)
    if not IMAGE_PATTERN.fullmatch(name):
        raise ConfigError(f"{name!r} is not an image reference (lower-case name[:tag])",
                          "command line", "--name")
    if args.mirror is not None and not base_image.MIRROR_PATTERN.fullmatch(args.mirror):
        raise ConfigError(f"{args.mirror!r} is not a mirror URL (http://, https:// or file:///)",
                          "command line", "--mirror")
    missing = base_image.problems()
    if missing:
        print("flagperf-ansible: image base: cannot make it here: " + "; ".join(missing),
              file=sys.stderr)
        return EXIT_INPUT
    try:
        made = base_image.make(name, args.suite, args.mirror,
                               say=lambda line: print(line, flush=True))
    except base_image.BaseImageError as err:
        print(f"flagperf-ansible: image base: {err}".replace("\n", " "), file=sys.stderr)
        return EXIT_FAILED
    print(base_image.describe(made))
    return EXIT_OK


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "summarize": cmd_summarize,
            "compare": cmd_compare, "export": cmd_export, "results": cmd_results,
            "cases": cmd_cases, "data": cmd_data, "image": cmd_image}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        print(f"flagperf-ansible: {err}", file=sys.stderr)
        return EXIT_INPUT
    except FileNotFoundError as err:
        print(f"flagperf-ansible: {err}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("flagperf-ansible: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
