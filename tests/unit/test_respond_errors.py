"""The engine's own error pages: scalws/handlers/respond.py builds them in
the order of SWS_ERR_* (csrc/include/scalws/respond.h); the two lists must
name the same statuses in the same order, or a 425 would carry a 431's page."""
from __future__ import annotations

import os
import re

from scalws.handlers.respond import ERROR_STATUSES, error_page

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "include", "scalws",
                      "respond.h")


def test_the_c_enum_the_c_table_and_the_python_list_agree():
    with open(HEADER) as f:
        text = f.read()
    enum = re.search(r"enum \{([^}]*)\}", text).group(1)
    names = [int(n) for n in re.findall(r"SWS_ERR_(\d+)", enum)]
    table = [int(n) for n in re.search(r"#define SWS_ERR_STATUSES[^{]*\{([^}]*)\}",
                                         text).group(1).split(",")]
    assert names == table == list(ERROR_STATUSES)


def test_each_page_says_its_status():
    for status in ERROR_STATUSES:
        page = error_page(status, "scalws")
        assert page.status == status and str(status).encode() in page.body
