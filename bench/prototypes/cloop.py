"""ADR 0001 experiment: the engine driven by a blocking C epoll loop, no uvloop.
Usage: python bench/prototypes/cloop.py CONFIG PORT (CONFIG: one site, one listen)."""
import os
import socket
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from scalws.config.loader import load_config
from scalws.server.engine import Engine
cfg = load_config(sys.argv[1])
e = Engine(cfg, 0)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen(511); s.setblocking(False)
e.add_listener(os.dup(s.fileno()), cfg.sites[0].listen[0].key)
while True:
    e.run_blocking(0.25)
