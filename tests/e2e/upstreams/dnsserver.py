"""A tiny authoritative DNS server on loopback for the live-DNS tests,
written apart from scalws/dns.py so that it checks it rather than agrees
with it: UDP, one question per message, A and AAAA from a table the test
changes while scalwsd runs.

    dns = DnsServer().start()          # dns.port on 127.0.0.1
    dns.set("app.test", ["127.0.0.2"], ttl=1)
    dns.mode = "drop"                  # "answer" | "drop" (a timeout) | "servfail"
    dns.queries("app.test")            # how many questions for the name so far
    dns.udp_max = 10                   # more records than this: a truncated UDP answer
                                       # (TC, no records); TCP on the same port has all
"""
from __future__ import annotations

import socket
import struct
import threading


class DnsServer:
    def __init__(self, host="127.0.0.1"):
        # UDP and TCP on one port: a port free for both (retried when the
        # TCP one happens to be taken)
        for _ in range(50):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind((host, 0))
            self.port = self.sock.getsockname()[1]
            self.tsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.tsock.bind((host, self.port))
                break
            except OSError:
                self.sock.close()
                self.tsock.close()
        else:
            raise OSError("no port free for both UDP and TCP")
        self.tsock.listen(16)
        self.records = {}      # lowercase name -> (addresses, ttl)
        self.cnames = {}       # lowercase name -> target
        self.mode = "answer"
        self.udp_max = 1000
        self.tcp_queries = 0
        self.asked = {}        # lowercase name -> count
        self.lock = threading.Lock()
        self.thread = None

    def set(self, name, addrs, ttl=1):
        with self.lock:
            self.records[name.lower()] = (list(addrs), ttl)

    def alias(self, name, target):
        with self.lock:
            self.cnames[name.lower()] = target.lower()

    def queries(self, name) -> int:
        with self.lock:
            return self.asked.get(name.lower(), 0)

    def start(self):
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        threading.Thread(target=self._serve_tcp, daemon=True).start()
        return self

    def stop(self):
        self.sock.close()
        self.tsock.close()

    def _serve_tcp(self):
        while True:
            try:
                conn, _ = self.tsock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                try:
                    while True:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        buf += chunk
                        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                            n = struct.unpack("!H", buf[:2])[0]
                            msg, buf = buf[2:2 + n], buf[2 + n:]
                            with self.lock:
                                self.tcp_queries += 1
                            reply = self._answer(msg, tcp=True)
                            if reply is not None:
                                conn.sendall(struct.pack("!H", len(reply)) + reply)
                except (OSError, ValueError, IndexError, struct.error):
                    pass

    def _serve(self):
        while True:
            try:
                msg, peer = self.sock.recvfrom(2048)
            except OSError:
                return
            try:
                reply = self._answer(msg)
            except (ValueError, IndexError, struct.error):
                continue
            if reply is not None:
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    return

    def _answer(self, msg, tcp=False):
        qid, _flags, qd = struct.unpack_from("!HHH", msg)
        if qd != 1:
            return None
        pos, labels = 12, []
        while msg[pos]:
            n = msg[pos]
            labels.append(msg[pos + 1:pos + 1 + n].decode())
            pos += 1 + n
        qtype, _qclass = struct.unpack_from("!HH", msg, pos + 1)
        question = msg[12:pos + 5]
        name = ".".join(labels).lower()
        with self.lock:
            self.asked[name] = self.asked.get(name, 0) + 1
            mode = self.mode
            target = self.cnames.get(name)
            record = self.records.get(target or name)
        if mode == "drop":
            return None
        rcode = 2 if mode == "servfail" else (0 if record or target else 3)
        answers = b""
        count = 0
        if mode == "answer" and target:
            # name CNAME target, then target's addresses (compressed to offset 12)
            tname = b"".join(bytes([len(p)]) + p.encode() for p in target.split(".")) + b"\0"
            answers += b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 60, len(tname)) + tname
            count += 1
            owner = 12 + len(question) + 12       # where tname starts in the message
            owner_ref = struct.pack("!H", 0xC000 | owner)
        else:
            owner_ref = b"\xc0\x0c"
        if mode == "answer" and record:
            addrs, ttl = record
            for a in addrs:
                if qtype == 1 and ":" not in a:
                    data = socket.inet_pton(socket.AF_INET, a)
                elif qtype == 28 and ":" in a:
                    data = socket.inet_pton(socket.AF_INET6, a)
                else:
                    continue
                answers += owner_ref + struct.pack("!HHIH", qtype, 1, ttl, len(data)) + data
                count += 1
        flags = 0x8180 | rcode
        if not tcp and count > self.udp_max:
            flags |= 0x0200                        # TC: ask again over TCP
            answers, count = b"", 0
        head = struct.pack("!HHHHHH", qid, flags, 1, count, 0, 0)
        return head + question + answers
