"""Where an answer's instructions go, by object: bench/instr.sh SPLIT=1.

    instr_split.py SMALL.cg LARGE.cg REQUESTS

Each function's self count (callgrind_annotate, no threshold) in the run
with more requests less its count in the run with fewer, over REQUESTS (the
difference of the two request counts): what an answer costs, start-up and
handshakes cancelled out. Summed by shared object; the engine's functions
by source file (what it inlined counts where it was inlined).
"""
import collections
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*)$")


def self_counts(path):
    out = subprocess.run(["callgrind_annotate", "--show=Ir", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in out.splitlines():
        m = LINE.match(line)
        if m and "PROGRAM TOTALS" not in line:
            counts[m.group(2)] += int(m.group(1).replace(",", ""))
    return counts


def owner(fn):
    m = re.search(r"\[([^\]]*)\]$", fn)
    obj = m.group(1).rsplit("/", 1)[-1] if m else "?"
    src = fn.split(":", 1)[0]
    # a header's inline function is named by its file, without an object
    if obj.startswith("engine.") or (obj == "?" and ("/csrc/" in src or src.startswith("csrc/"))):
        return "engine: " + src.rsplit("/", 1)[-1]
    return obj


def main():
    small, large, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a, b = self_counts(small), self_counts(large)
    by = collections.Counter()
    for fn in set(a) | set(b):
        by[owner(fn)] += (b[fn] - a[fn]) / n
    total = sum(by.values())
    engine = sum(v for k, v in by.items() if k.startswith("engine: "))
    print(f"per answer, by object ({total:,.0f} in all; the engine {engine:,.0f}):")
    for k, v in by.most_common():
        if abs(v) >= 0.5:
            print(f"{v:9,.0f}  {100 * v / total:5.1f} %  {k}")


if __name__ == "__main__":
    main()
