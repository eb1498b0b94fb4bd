"""Entry points: `scalwsd` and `scalws-controller` (scalws/control/controller.py).

Exit codes: 0 success; 1 configuration refused (--check-config, or at start);
2 usage; 3 the server could not start (bind failed, ...).
"""
from __future__ import annotations

import argparse
import os
import sys

from scalws import __version__


def version_line() -> str:
    """`scalwsd --version`: the version, and what setup.py recorded of the
    build of the compiled modules (scalws/_buildinfo.py): commit, compiler,
    -march, PGO, BOLT."""
    try:
        from scalws import _buildinfo as b
    except ImportError:
        return f"scalwsd {__version__} (build information unavailable)"
    if getattr(b, "VERSION", None) != __version__:
        return (f"scalwsd {__version__} (build information unavailable: "
                f"scalws/_buildinfo.py is from version {getattr(b, 'VERSION', '?')}; rebuild)")
    commit, cc, march, pgo, bolt = (getattr(b, k, "?") for k in ("COMMIT", "CC", "MARCH", "PGO", "BOLT"))
    return f"scalwsd {__version__} (commit {commit}, {cc}, {march}, PGO {pgo}, BOLT {bolt})"


class _VersionAction(argparse.Action):
    """--version: the line as is (argparse's own action rewraps it to the
    terminal's width)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def _parser():
    p = argparse.ArgumentParser(
        prog="scalwsd",
        description="ScalWS web server. Without --config it serves a built-in "
                    "default site on http://127.0.0.1:8080/.")
    p.add_argument("-c", "--config", metavar="FILE", help="run with this configuration file")
    p.add_argument("-t", "--check-config", metavar="FILE", nargs="?", const="",
                   help="validate FILE (or the --config file) like `nginx -t`; exit 0 or 1")
    p.add_argument("--stats-file", metavar="PATH",
                   help="share the counters (status: /metrics) in a file at PATH, "
                        "created at start and removed at exit, for other readers "
                        "(scalws.control.stats.read)")
    p.add_argument("-v", "--version", action=_VersionAction,
                   help="print the version and how this build was made, and exit")
    return p


def scalwsd_main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from scalws.config.errors import ConfigError

    if args.check_config is not None:
        from scalws.config.loader import load_config
        path = args.check_config or args.config
        if not path:
            print("scalwsd: --check-config needs a FILE (or --config FILE)", file=sys.stderr)
            return 2
        try:
            config = load_config(path)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            print(f"scalwsd: configuration file {path} test failed", file=sys.stderr)
            return 1
        from scalws.config import users
        for w in config.warnings + users.check(config):
            print(f"scalwsd: [warn] {w}", file=sys.stderr)
        print(f"scalwsd: the configuration file {path} syntax is ok")
        print(f"scalwsd: configuration file {path} test is successful")
        return 0

    # The server loads its file in a child (scalws/control/cfgload.py): the
    # loader's modules never enter the master, nor the workers forked from it.
    # The child starts first, and the master's own imports run beside it.
    from scalws.control import cfgload
    loading = cfgload.start(args.config)
    from scalws.control.master import Master, StartupError
    try:
        config = loading.result()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if not args.config:
        print("scalwsd: no --config given: serving the built-in default site on "
              "http://127.0.0.1:8080/", file=sys.stderr)

    if config.instances is not None and not os.environ.get("SCALWS_INSTANCE"):
        f, line, col = config.instances.mark
        print(f"{f}:{line}:{col}: instances: this configuration runs several instances: "
              f"start it with `scalws-controller --config {args.config}` (or remove "
              f"'instances' to run one scalwsd)", file=sys.stderr)
        return 1

    try:
        return Master(config, args.config, stats_file=args.stats_file).run()
    except StartupError as exc:
        print(f"scalwsd: [emerg] {exc}", file=sys.stderr)
        return 3


def controller_parser():
    """scalws-controller's options (here, without the controller's imports:
    tools/gen_man.py reads it where PyYAML may be missing)."""
    p = argparse.ArgumentParser(
        prog="scalws-controller",
        description="Runs instances.min..max scalwsd instances of one configuration, "
                    "each pinned to its CPUs and in its own cgroup, and scales between "
                    "them (docs/operations.md).")
    p.add_argument("-c", "--config", metavar="FILE", required=True,
                   help="a scalwsd configuration with an `instances:` section")
    p.add_argument("--cgroup-root", metavar="DIR",
                   help="the cgroup file system (default $SCALWS_CGROUP_ROOT or /sys/fs/cgroup)")
    p.add_argument("--cgroup-name", metavar="NAME", default="scalws",
                   help="the controller's group under it (default scalws)")
    p.add_argument("--no-cgroups", action="store_true",
                   help="pin the instances but put them in no cgroup")
    return p


def controller_main(argv=None) -> int:
    from scalws.control.controller import main
    return main(argv)


if __name__ == "__main__":
    sys.exit(scalwsd_main())
