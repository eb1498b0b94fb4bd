"""ConfigError: every problem the loader found in one configuration file.

The loader does not stop at the first problem: it walks the whole document,
collects each problem with its position, and raises one ConfigError at the
end, so an operator fixes a file in one pass (as with `nginx -t`, but
complete). `str(error)` is one line per problem, in file order:

    /etc/scalws/scalws.yaml:12:17: sites[0].routes[2].respond.status: status 1000 is out of range

Lines and columns are 1-based; 0:0 means "the file as a whole" (for example
a file that cannot be read). A problem that belongs to no key (a YAML syntax
error, an empty file) has an empty key path, and the key path segment is then
left out of its line.
"""
from __future__ import annotations

import collections
from collections.abc import Iterable  # noqa: F401 (annotations)

# The file name in a problem of the configuration scalwsd runs without --config.
DEFAULT_SOURCE = "<built-in default>"


# file; line and column, 1-based (0: the whole file); key_path
# ("sites[0].routes[2].respond.status", "": no key); message. A
# collections.namedtuple: typing's NamedTuple would load typing (0.47 MiB)
# into every process.
class Problem(collections.namedtuple("Problem", "file line column key_path message")):
    __slots__ = ()

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        if self.key_path:
            return f"{where}: {self.key_path}: {self.message}"
        return f"{where}: {self.message}"


class ConfigError(Exception):
    """One or more problems in a configuration; `problems` is in file order.

    Each problem is a Problem, which is also the plain tuple
    (file, line, column, key_path, message).
    """

    def __init__(self, problems: Iterable[tuple]):
        items = [p if isinstance(p, Problem) else Problem(*p) for p in problems]
        if not items:
            raise ValueError("ConfigError needs at least one problem")
        # A stable sort: problems on the same position keep the order in
        # which the loader found them.
        self.problems = sorted(items, key=lambda p: (p.file, p.line, p.column))
        super().__init__(self.problems)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    def __reduce__(self):
        return (type(self), (self.problems,))
