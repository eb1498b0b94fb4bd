"""tools/gen_huffman.py: the committed csrc/http/h2/huffman_table.h is what
the generator makes of RFC 7541 Appendix B (tools/data/rfc7541-appendix-b.txt),
and that table is the one the Python `hpack` package uses."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "csrc", "http", "h2", "huffman_table.h")


def test_committed_header_equals_a_fresh_generation(tmp_path):
    out = tmp_path / "huffman_table.h"
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_huffman.py"), "--out", str(out)],
                   check=True, cwd="/")
    with open(HEADER, encoding="utf-8") as f:
        assert out.read_text(encoding="utf-8") == f.read()


def test_check_mode_flags_a_stale_header(tmp_path):
    out = tmp_path / "huffman_table.h"
    gen = [sys.executable, os.path.join(ROOT, "tools", "gen_huffman.py"), "--out", str(out)]
    subprocess.run(gen, check=True)
    assert subprocess.run(gen + ["--check"]).returncode == 0
    out.write_text(out.read_text().replace("0x1ff8", "0x1ff9", 1))
    assert subprocess.run(gen + ["--check"], capture_output=True).returncode == 1


def _array(text, name):
    m = re.search(r"%s\[\d+\] = \{(.*?)\};" % name, text, re.S)
    return [int(v, 0) for v in re.findall(r"0x[0-9a-f]+|\d+", m.group(1))]


def test_table_is_the_hpack_package_one():
    hc = pytest.importorskip("hpack.huffman_constants")
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    assert _array(text, "sws_huff_code") == list(hc.REQUEST_CODES)
    assert _array(text, "sws_huff_len") == list(hc.REQUEST_CODES_LENGTH)


@pytest.mark.parametrize("old,new,why", [
    ("1ff8  [13]", "1ff9  [13]", b"disagree"),            # bits and hex differ
    ("|11111111|11000    ", "|11111111|11001    ", b"disagree"),
    ("'a' ( 97)  |00011 ", "'a' ( 97)  |00010 ", b"disagree"),
])
def test_generator_refuses_a_damaged_table(tmp_path, old, new, why):
    with open(os.path.join(ROOT, "tools", "data", "rfc7541-appendix-b.txt"), encoding="ascii") as f:
        src = f.read()
    assert old in src
    bad = tmp_path / "b.txt"
    bad.write_text(src.replace(old, new, 1), encoding="ascii")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_huffman.py"), "--source", str(bad),
                        "--out", str(tmp_path / "h.h")], capture_output=True)
    assert r.returncode != 0 and why in r.stderr


def test_generator_refuses_a_table_that_is_not_prefix_free(tmp_path):
    # 'a' given '0's code (bits, hex and length consistent): two symbols, one code
    with open(os.path.join(ROOT, "tools", "data", "rfc7541-appendix-b.txt"), encoding="ascii") as f:
        src = f.read()
    row = "'a' ( 97)  |00011                                         3  [ 5]"
    assert row in src
    bad = tmp_path / "b.txt"
    bad.write_text(src.replace(row, row.replace("00011", "00000").replace("  3  [", "  0  ["), 1))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_huffman.py"), "--source", str(bad),
                        "--out", str(tmp_path / "h.h")], capture_output=True)
    assert r.returncode != 0 and (b"prefix" in r.stderr or b"complete" in r.stderr)
