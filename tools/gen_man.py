"""Generates the man pages from the docs, so they never drift apart:

    scalwsd(8)       NAME, SYNOPSIS, OPTIONS (from the command line parser
                     itself), then docs/operations.md
    scalws.yaml(5)   docs/configuration.md

    python tools/gen_man.py --out DIR

The date in the header is SOURCE_DATE_EPOCH's (dpkg sets it from
debian/changelog), else the last commit's, so two builds of one commit
write the same bytes. The Markdown handled is the docs' own: headings,
paragraphs, lists, fenced code, tables, inline code, emphasis and links.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _escape(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return text


def _inline(text: str) -> str:
    """Markdown inline markup to roff font changes."""
    out = []
    # Split on code spans first: nothing inside them is markup.
    for i, part in enumerate(re.split(r"(`[^`]*`)", text)):
        if i % 2:
            out.append("\\fB" + _escape(part[1:-1]) + "\\fR")
            continue
        part = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", part)       # links: the text
        part = re.sub(r"<!--.*?-->", "", part)
        part = _escape(part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", part)
        part = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?!\w)", r"\\fI\1\\fR", part)
        part = re.sub(r"(?<!\w)_([^_\s][^_]*)_(?!\w)", r"\\fI\1\\fR", part)
        out.append(part)
    return "".join(out)


def _line(text: str) -> str:
    """One line of running text; a leading dot or quote would be a request."""
    text = _inline(text)
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def _cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|"):
        row = row[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)]


def markdown_to_roff(md: str, top_level: int = 1) -> list[str]:
    """Converts a Markdown document; headings of level `top_level` become .SH,
    deeper ones .SS (and deeper still, bold paragraphs)."""
    lines = md.splitlines()
    out: list[str] = []
    i = 0
    para: list[str] = []

    def flush():
        if para:
            out.append(".PP")
            out.extend(_line(p) for p in para)
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fence_indent = len(line) - len(line.lstrip())
            i += 1
            out += [".PP", ".RS 4", ".nf"]
            while i < len(lines) and not lines[i].strip().startswith("```"):
                code = lines[i][fence_indent:] if lines[i][:fence_indent].strip() == "" else lines[i]
                code = _escape(code)
                out.append("\\&" + code if code else "")
                i += 1
            out += [".fi", ".RE"]
            i += 1
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            flush()
            level = len(m.group(1))
            title = _inline(m.group(2))
            if level <= top_level:
                out.append(f'.SH "{title.upper()}"')
            elif level == top_level + 1:
                out.append(f'.SS "{title}"')
            else:
                out += [".PP", f"\\fB{title}\\fR"]
            i += 1
            continue
        if stripped.startswith("|") and i + 1 < len(lines) and \
                re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            flush()
            header = _cells(line)
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _cells(lines[i])
                out.append(".TP")
                out.append(_line(cells[0]))
                rest = [f"{header[k]}: {cells[k]}" if k < len(cells) - 1 else cells[k]
                        for k in range(1, len(cells)) if cells[k]]
                # The last column is the meaning; the middle ones are labelled.
                if rest[:-1]:
                    out.append(_line("; ".join(rest[:-1]) + "."))
                    out.append(".br")
                if rest:
                    out.append(_line(rest[-1]))
                i += 1
            continue
        m = re.match(r"^(\s*)([-*]|\d+\.)\s+(.*)$", line)
        if m:
            flush()
            indent = len(m.group(1))
            mark = "\\(bu" if m.group(2) in "-*" else m.group(2)
            item = [m.group(3)]
            i += 1
            while i < len(lines) and lines[i].strip() and \
                    not re.match(r"^\s*([-*]|\d+\.)\s+", lines[i]) and \
                    not lines[i].strip().startswith("```") and \
                    len(lines[i]) - len(lines[i].lstrip()) > indent:
                item.append(lines[i].strip())
                i += 1
            if indent:
                out.append(".RS 4")
            out.append(f'.IP "{mark}" 4')
            out.extend(_line(t) for t in item)
            if indent:
                out.append(".RE")
            continue
        if not stripped:
            flush()
            i += 1
            continue
        para.append(stripped)
        i += 1
    flush()
    return out


def _date() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        try:
            epoch = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            epoch = "0"
    return datetime.datetime.fromtimestamp(int(epoch or 0), datetime.timezone.utc).strftime("%Y-%m-%d")


def _header(name: str, section: int, title: str) -> list[str]:
    from scalws import __version__
    return ['.\\" Generated by tools/gen_man.py from the ScalWS docs; do not edit.',
            f'.TH "{name.upper()}" "{section}" "{_date()}" "scalws {__version__}" "{title}"']


def scalwsd_page() -> str:
    from scalws.cli import _parser
    parser = _parser()
    out = _header("scalwsd", 8, "System Administration")
    out += [".SH NAME", "scalwsd \\- the ScalWS web server",
            ".SH SYNOPSIS",
            "\\fBscalwsd\\fR [\\fB\\-\\-config\\fR \\fIFILE\\fR]",
            ".br",
            "\\fBscalwsd\\fR \\fB\\-\\-check\\-config\\fR \\fIFILE\\fR",
            ".br",
            "\\fBscalwsd\\fR \\fB\\-\\-version\\fR",
            ".SH DESCRIPTION", _line(parser.description),
            ".PP",
            _line("The Debian package runs it as `scalws.service` (or `/etc/init.d/scalws`) "
                  "with `/etc/scalws/scalws.yaml`, whose keys scalws.yaml(5) describes."),
            ".SH OPTIONS"]
    for action in parser._actions:
        if not action.option_strings:
            continue
        flags = ", ".join(f"\\fB{_escape(o)}\\fR" + (f" \\fI{action.metavar}\\fR" if action.metavar else "")
                          for o in action.option_strings)
        out += [".TP", flags, _line(action.help or "")]
    ops = open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8").read()
    ops = re.sub(r"\A#[^\n]*\n", "", ops)          # the page's own title
    out += markdown_to_roff(ops, top_level=2)
    out += [".SH EXIT STATUS",
            _line("0 success; 1 configuration refused (--check-config, or at start); "
                  "2 usage; 3 the server could not start (a listen address could not be bound, ...)."),
            ".SH FILES", ".TP", "\\fI/etc/scalws/scalws.yaml\\fR", "The configuration.",
            ".TP", "\\fI/var/log/scalws/\\fR", "Error and access logs (rotated by logrotate, USR1).",
            ".TP", "\\fI/run/scalws/scalwsd.pid\\fR", "The master's process id.",
            ".SH SEE ALSO", "\\fBscalws.yaml\\fR(5), \\fBsystemctl\\fR(1), \\fBlogrotate\\fR(8)"]
    return "\n".join(out) + "\n"


def controller_page() -> str:
    from scalws.cli import controller_parser
    parser = controller_parser()
    out = _header("scalws-controller", 8, "System Administration")
    out += [".SH NAME", "scalws-controller \\- run several scalwsd instances, pinned and autoscaled",
            ".SH SYNOPSIS", "\\fBscalws-controller\\fR \\fB\\-\\-config\\fR \\fIFILE\\fR",
            ".SH DESCRIPTION", _line(parser.description or ""),
            ".PP",
            _line("FILE is a scalwsd configuration with an `instances:` section "
                  "(scalws.yaml(5)); what the controller does with it, its signals, "
                  "cgroups, autoscaling and metrics are in scalwsd(8), section "
                  "scalws-controller."),
            ".SH OPTIONS"]
    for action in parser._actions:
        if not action.option_strings:
            continue
        flags = ", ".join(f"\\fB{_escape(o)}\\fR" + (f" \\fI{action.metavar}\\fR" if action.metavar else "")
                          for o in action.option_strings)
        out += [".TP", flags, _line(action.help or "")]
    out += [".SH EXIT STATUS",
            _line("0 after a stop; 1 configuration refused; 3 an instance could not start "
                  "before the first were ready."),
            ".SH SEE ALSO", "\\fBscalwsd\\fR(8), \\fBscalws.yaml\\fR(5)"]
    return "\n".join(out) + "\n"


def config_page() -> str:
    out = _header("scalws.yaml", 5, "File Formats")
    out += [".SH NAME", "scalws.yaml \\- ScalWS web server configuration",
            ".SH SYNOPSIS", "\\fI/etc/scalws/scalws.yaml\\fR"]
    cfg = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    cfg = re.sub(r"\A#[^\n]*\n", "", cfg)
    body = markdown_to_roff(cfg, top_level=2)
    if body and not body[0].startswith(".SH"):
        body = [".SH DESCRIPTION"] + body
    out += body
    out += [".SH SEE ALSO", "\\fBscalwsd\\fR(8)"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True,
                   help="folder for scalwsd.8, scalws-controller.8 and scalws.yaml.5")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("scalwsd.8", scalwsd_page()), ("scalws-controller.8", controller_page()),
                       ("scalws.yaml.5", config_page())):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
