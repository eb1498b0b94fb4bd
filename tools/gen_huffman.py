#!/usr/bin/env python3
"""Generate csrc/http/h2/huffman_table.h from RFC 7541 Appendix B.

    python3 tools/gen_huffman.py            write the header
    python3 tools/gen_huffman.py --check    exit 1 if the committed header differs
    python3 tools/gen_huffman.py --out PATH write it elsewhere (the unit test does)
    python3 tools/gen_huffman.py --source F read another copy of the appendix

The source is the appendix's table as the RFC prints it
(tools/data/rfc7541-appendix-b.txt): one row per symbol,
`sym  code as bits  code as hex  len`. Each row is read strictly: its bits
must equal its hex and its length, and the symbols must come in order
0..256. Then the table as a whole is checked: 257 symbols, no code a
prefix of another, the code complete (Kraft sum exactly 1: every bit
string decodes or is a prefix of a code), EOS 30 one bits, and canonical
(codes of one length consecutive, in symbol order, after every shorter
code), which the decoding tables below depend on. Any failure stops the
generation with the row or the rule that broke.

The output depends only on the table: the same bytes on every run.
tests/unit/test_gen_huffman.py asserts the committed header equals a fresh
generation.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join("tools", "data", "rfc7541-appendix-b.txt")
OUTPUT = os.path.join("csrc", "http", "h2", "huffman_table.h")

# First-level table: the top FAST_BITS bits of the input give the symbol
# and its length at once for every code up to FAST_BITS long.
FAST_BITS = 11

# `'a' ( 97)  |00011    3  [ 5]`, `    (  0)  |...`, `EOS (256)  |...`
ROW = re.compile(r"^(?:'.'|EOS|   ) \(\s*(\d+)\)  \|([01|]+)\s+([0-9a-f]+)  \[\s*(\d+)\]$")


def parse(path):
    """Returns [(code, length)] for symbols 0..256, from the appendix's rows."""
    codes = []
    with open(path, encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = ROW.match(line)
            if not m:
                if re.search(r"\(\s*\d+\)\s+\|", line):
                    sys.exit(f"{path}:{lineno}: a row that does not parse: {line!r}")
                continue
            sym, bits, hexcode, length = int(m[1]), m[2], int(m[3], 16), int(m[4])
            for part in bits.split("|")[:-1]:
                if len(part) != 8:
                    sys.exit(f"{path}:{lineno}: bits not grouped by 8: {bits}")
            bits = bits.replace("|", "")
            if sym != len(codes):
                sys.exit(f"{path}:{lineno}: symbol {sym} where {len(codes)} was due")
            if len(bits) != length or int(bits, 2) != hexcode:
                sys.exit(f"{path}:{lineno}: bits {bits} disagree with {hexcode:x} [{length}]")
            codes.append((hexcode, length))
    return codes


def check(codes):
    """The table's shape, which the C tables and decoder rely on."""
    if len(codes) != 257:
        sys.exit(f"{len(codes)} symbols, not 257")
    if codes[256] != ((1 << 30) - 1, 30):
        sys.exit("EOS is not 30 one bits")
    if min(l for _, l in codes) != 5 or max(l for _, l in codes) != 30:
        sys.exit("code lengths outside 5..30")
    kraft = sum(1 << (30 - l) for _, l in codes)
    if kraft != 1 << 30:
        sys.exit(f"the code is not complete (Kraft sum {kraft} / {1 << 30})")
    as_bits = sorted(format(c, f"0{l}b") for c, l in codes)
    for a, b in zip(as_bits, as_bits[1:]):
        if b.startswith(a):
            sys.exit(f"code {a} is a prefix of {b}")
    nxt, prev = 0, 0
    for sym in sorted(range(257), key=lambda s: (codes[s][1], s)):
        code, length = codes[sym]
        nxt <<= length - prev
        prev = length
        if code != nxt:
            sys.exit(f"not canonical at symbol {sym}")
        nxt += 1


def tables(codes):
    """The decoder's tables: fast[], limit[], base[], sym[] (see the header comment)."""
    fast = [0] * (1 << FAST_BITS)
    for sym, (code, length) in enumerate(codes):
        if length <= FAST_BITS:
            lo = code << (FAST_BITS - length)
            for i in range(lo, lo + (1 << (FAST_BITS - length))):
                fast[i] = length << 8 | sym
    order = sorted(range(257), key=lambda s: (codes[s][1], s))
    limit, base = [0] * 31, [0] * 31
    offset = 0
    for length in range(1, 31):
        syms = [s for s in order if codes[s][1] == length]
        first = codes[syms[0]][0] if syms else None
        if syms:
            base[length] = (offset - first) % (1 << 32)
            end = first + len(syms)
        else:
            # no code of this length: the bound is the previous one's, scaled
            end = (limit[length - 1] >> (32 - length)) if length > 1 else 0
        offset += len(syms)
        limit[length] = (end << (32 - length)) if length < 30 else 0
        if length < 30 and limit[length] >= 1 << 32:
            sys.exit(f"limit of length {length} does not fit 32 bits")
    return fast, limit, base, order


def c_array(ctype, name, values, fmt, per_line, comment):
    lines = [f"/* {comment} */", f"static const {ctype} {name}[{len(values)}] = {{"]
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt.format(v) for v in values[i:i + per_line]) + ",")
    lines.append("};")
    return "\n".join(lines) + "\n"


HEADER = """\
/* GENERATED by tools/gen_huffman.py from tools/data/rfc7541-appendix-b.txt
 * (RFC 7541 Appendix B) — DO NOT EDIT. Regenerate from the repository root:
 *     python3 tools/gen_huffman.py          (--check: compare, write nothing)
 *
 * Encoding: sws_huff_code[s] holds symbol s's code in its low
 * sws_huff_len[s] bits (5..30), EOS (256) included.
 *
 * Decoding: the code is canonical (codes of one length consecutive, after
 * all shorter codes; the generator checks it), so a code's length follows
 * from comparing the input's next 32 bits, MSB first, against one bound
 * per length, and its symbol from an offset: no tree, no state machine.
 * The common case is one look-up: sws_huff_fast[next FAST_BITS bits] is
 * (len << 8 | symbol) for every code of up to SWS_HUFF_FAST_BITS bits
 * (every printable ASCII character but # $ < > @ [ \\ ] ^ ` { } ~), 0 for
 * the prefixes of longer codes. For those: the length is the smallest
 * L in FAST_BITS+1..29 with window < sws_huff_limit[L] (30 when none), and
 * the symbol sws_huff_sym[(window >> (32 - L)) + sws_huff_base[L]] (mod
 * 2^32). Why this over the 4-bit state machine many decoders use: about 5
 * KiB of tables instead of 16 KiB (256 states x 16 nibbles x 4 bytes), and
 * one load per symbol instead of two dependent loads per input byte.
 */
#ifndef SCALWS_H2_HUFFMAN_TABLE_H
#define SCALWS_H2_HUFFMAN_TABLE_H

#include <stdint.h>

"""


def render(codes):
    fast, limit, base, order = tables(codes)
    out = [HEADER, f"#define SWS_HUFF_FAST_BITS {FAST_BITS}\n#define SWS_HUFF_EOS 256\n\n"]
    out.append(c_array("uint32_t", "sws_huff_code", [c for c, _ in codes], "0x{:x}", 8,
                       "symbol -> code, in the low sws_huff_len[symbol] bits"))
    out.append("\n")
    out.append(c_array("uint8_t", "sws_huff_len", [l for _, l in codes], "{:d}", 16,
                       "symbol -> code length in bits"))
    out.append("\n")
    out.append(c_array("uint16_t", "sws_huff_fast", fast, "0x{:04x}", 12,
                       "next SWS_HUFF_FAST_BITS input bits -> len << 8 | symbol; 0: a longer code"))
    out.append("\n")
    out.append(c_array("uint32_t", "sws_huff_limit", limit, "0x{:08x}", 6,
                       "[L]: 32-bit windows below it hold a code of L bits or fewer (L < 30)"))
    out.append("\n")
    out.append(c_array("uint32_t", "sws_huff_base", base, "0x{:08x}", 6,
                       "[L]: added (mod 2^32) to an L-bit code, its place in sws_huff_sym"))
    out.append("\n")
    out.append(c_array("uint16_t", "sws_huff_sym", order, "{:d}", 16,
                       "the symbols in canonical order (by length, then symbol)"))
    out.append("\n#endif\n")
    return "".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed header differs")
    ap.add_argument("--out", help="where to write (default: %s)" % OUTPUT)
    ap.add_argument("--source", help="the appendix's text (default: %s)" % SOURCE)
    args = ap.parse_args(argv)
    codes = parse(args.source or os.path.join(ROOT, SOURCE))
    check(codes)
    text = render(codes)
    path = args.out or os.path.join(ROOT, OUTPUT)
    if args.check:
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{path} differs from a fresh generation: run python3 tools/gen_huffman.py",
                      file=sys.stderr)
                return 1
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
