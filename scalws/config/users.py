"""Who the web workers run as, and what that user can reach.

A scalwsd started as root never leaves its workers root by accident: without
`user:` they switch to the package's `scalws` user, or to `nobody` where
that does not exist (nginx's default), and the master says which at start.
`user: root` is allowed, as an explicit choice that --check-config and the
start warn about. Started unprivileged, the workers stay as they were.

`check` looks at the machine it runs on, so --check-config, the start and
each reload run it (not load_config, which only reads the file): a
document root the workers' user cannot enter, or a unix socket of an
upstream it cannot connect to, would make every request to it fail; they
are warnings, since the file may be checked on another machine or before
the socket exists.

Pure Python (pwd, os): imports nothing compiled.
"""
from __future__ import annotations

import grp
import os
import pwd
import stat

from scalws.config.errors import Problem

DEFAULT_USERS = ("scalws", "nobody")


def default_user() -> str | None:
    """The first of DEFAULT_USERS this system has; None when it has neither."""
    for name in DEFAULT_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None


def worker_user(config, euid: int | None = None) -> str | None:
    """The user the web workers switch to: `user:` when set; as root
    without it, default_user(); None when scalwsd does not run as root
    (the workers keep its user) or no default user exists."""
    if config.user:
        return config.user
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    return default_user()


def _credentials(name: str) -> tuple[int, set[int]]:
    pw = pwd.getpwnam(name)
    return pw.pw_uid, set(os.getgrouplist(name, pw.pw_gid))


def _allowed(st: os.stat_result, uid: int, gids: set[int], want: int) -> bool:
    """Would `uid` with groups `gids` get the access `want` (a mask of
    os.R_OK, W_OK, X_OK) from these permission bits? (ACLs aside.)"""
    if uid == 0:
        return True
    if st.st_uid == uid:
        shift = 6
    elif st.st_gid in gids:
        shift = 3
    else:
        shift = 0
    return (st.st_mode >> shift) & want == want


def _describe(st: os.stat_result) -> str:
    def name(get, ident):
        try:
            return get(ident)[0]
        except KeyError:
            return str(ident)
    return (f"mode {stat.S_IMODE(st.st_mode):04o}, {name(pwd.getpwuid, st.st_uid)}:"
            f"{name(grp.getgrgid, st.st_gid)}")


def _unreachable(path: str, uid: int, gids: set[int], last: int) -> str | None:
    """Walks `path` as `uid`: every folder above it searchable, `path`
    itself giving `last`. Returns the first obstacle in words, or None."""
    parts = os.path.abspath(path).split("/")[1:]
    here = "/"
    for part in parts:
        try:
            st = os.stat(here)
        except OSError:
            return None                       # not there (yet): nothing to say
        if not _allowed(st, uid, gids, os.X_OK):
            return f"cannot enter {here} ({_describe(st)})"
        here = os.path.join(here, part)
    try:
        st = os.stat(here)
    except OSError:
        return None
    if not _allowed(st, uid, gids, last):
        return f"cannot use {here} ({_describe(st)})"
    return None


def check(config, euid: int | None = None) -> list[Problem]:
    """Warnings about the workers' user for this configuration."""
    out: list[Problem] = []
    root_mark = getattr(config, "user_mark", None) or (config.source, 1, 1)
    if config.user == "root":
        out.append(Problem(*root_mark, "user", "the workers run as root, with every "
                           "privilege of root; a user of their own (the package's scalws, "
                           "or nobody) is what they need"))
    as_root = (os.geteuid() if euid is None else euid) == 0
    for app in config.apps.values():
        # An app runs arbitrary code: as root only when someone said so,
        # and even then it is worth a line (its own `user:`, else the top one).
        if app.user == "root" or (as_root and not app.user):
            why = ("its user: (or the top-level one) says root" if app.user else
                   "scalwsd runs as root and neither the app nor the top level names a user")
            out.append(Problem(*app.mark, f"apps.{app.name}",
                               f"the app runs as root ({why}): give it a user of its own"))
    name = worker_user(config, euid)
    if name is None or name == "root":
        return out
    try:
        uid, gids = _credentials(name)
    except KeyError:
        return out
    # A document root is opened by the worker before it drops its privileges,
    # so only the root itself needs to let the user in (and read, to list it).
    seen = set()
    for si, site in enumerate(config.sites):
        for ri, route in enumerate(site.routes):
            root = getattr(route.handler, "root", None)
            if not isinstance(root, str) or root in seen:
                continue
            seen.add(root)
            try:
                st = os.stat(root)
            except OSError:
                continue
            if not _allowed(st, uid, gids, os.X_OK | os.R_OK):
                out.append(Problem(*route.mark, f"sites[{si}].routes[{ri}]",
                                   f"the workers run as {name}, who cannot read the document "
                                   f"root {root} ({_describe(st)}): every request to it would "
                                   f"be refused"))
    # A unix socket is connected to by path, as the worker's user.
    for gname, group in config.upstreams.items():
        for server in group.servers:
            if server.kind != "unix" or not server.path:
                continue
            problem = _unreachable(server.path, uid, gids, os.W_OK)
            if problem:
                out.append(Problem(*server.mark, f"upstreams.{gname}",
                                   f"the workers run as {name}, who {problem}: they could "
                                   f"not connect to {server.path}"))
    return out
