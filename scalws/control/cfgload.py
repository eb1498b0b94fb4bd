"""Loading a configuration in a child process, for the master (issue 37).

The loader needs PyYAML, every directive module and, for a TLS site,
pyOpenSSL and cryptography (scalws/config/tlscheck.py). The master needs
only the result, plain data (scalws/config/model.py): `load` runs the
loader in a throwaway child (scalws/control/forkcall.py), which sends back
the Config, or the ConfigError with every problem, and exits. The master
and the workers forked from it keep the model's classes and nothing of the
loader: the tree's PSS 2 MiB less with a plain site, 17 MiB less with a
TLS one, 1 worker (docs/benchmarks/2026-12-07-footprint.md).

The child is the master's copy, with its privileges: it reads what the
master would have read (the file, certificates and keys, names resolved at
load). Each load pays the loader's imports again (about 0.1 s).
"""
from __future__ import annotations

import os

from scalws.config.errors import DEFAULT_SOURCE, ConfigError
from scalws.control import forkcall, title


def _load(path):
    title.set_title("scalwsd: configuration loader", "scalwsd-load")
    from scalws.config.loader import default_config, load_config
    return load_config(path) if path else default_config()


class Loading:
    """A load started in its child (start); result() waits for the Config."""

    def __init__(self, path):
        self.path = path
        self._call = forkcall.start(_load, path)

    def result(self, previous=None):
        """The Config. Raises ConfigError or OSError as load_config does; a
        loader that fails otherwise is a ConfigError naming the file, with
        the loader's traceback. `previous`: the Config this one replaces,
        whose tables it shares where they are equal (_share_tables)."""
        try:
            cfg = self._call.result()
        except forkcall.ChildFailed as exc:
            source = os.fspath(self.path) if self.path else DEFAULT_SOURCE
            raise ConfigError([(source, 0, 0, "", f"the configuration loader failed: {exc}")]) \
                from None
        _share_tables(cfg, previous)
        return cfg


def start(path=None):
    """The load of the file at `path` (None: the built-in default), started
    in its child now: scalwsd's first load runs beside the master's own
    imports (exec to the first answer: 0.15 s instead of 0.20)."""
    return Loading(path)


def load(path=None, previous=None):
    """The Config of the file at `path`, as start(path).result(previous)."""
    return Loading(path).result(previous)


def _share_tables(cfg, previous):
    """Each static route holds its media-type map (about 2,000 entries,
    some 100 KiB): one object for all the routes whose maps are equal, and
    the one `previous` had when it is equal too. In the loader's process
    they shared their strings; unpickled here, each config would bring its
    own copies, and the master holds two configs during a reload (and a
    worker forked then maps both)."""
    tables = []
    for config in (previous, cfg):
        for site in (config.sites if config is not None else ()):
            for route in site.routes:
                handler = route.handler
                table = getattr(handler, "mime_types", None)
                if not isinstance(table, dict):
                    continue
                for seen in tables:
                    if seen is table or seen == table:
                        handler.mime_types = seen
                        break
                else:
                    tables.append(table)
