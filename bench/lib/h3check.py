"""The tls-h3-* scenarios' preflight (bench/lib/servers.sh): the URL answers
200 over HTTP/3 with exactly the expected body, twice (Debian's curl has no
HTTP/3; the client is aioquic, as in tests/e2e/h3client.py).

    h3check.py URL [EXPECTED_FILE]     (no file: the body is "hello world")

Prints the problem and exits 1.
"""
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.e2e.h3client import H3  # noqa: E402


def main():
    url = urllib.parse.urlsplit(sys.argv[1])
    want = open(sys.argv[2], "rb").read() if len(sys.argv) > 2 and sys.argv[2] else b"hello world"
    try:
        with H3(url.port, host=url.hostname, server_name="localhost", verify=False,
                authority=url.netloc) as c:
            for _ in range(2):  # the first answer may fill a cache
                status, _, body = c.get(url.path or "/")
    except Exception as exc:  # noqa: BLE001 - any failure is the preflight's answer
        print(f"preflight: HTTP/3 to {sys.argv[1]} failed: {exc!r}")
        return 1
    if status != 200:
        print(f"preflight: {sys.argv[1]} answered {status} over HTTP/3, expected 200")
        return 1
    if body != want:
        print(f"preflight: {sys.argv[1]} body differs ({len(body)} bytes, expected {len(want)})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
