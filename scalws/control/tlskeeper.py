"""The TLS keeper: a child of the master that keeps the workers' shared TLS
memory fresh (scalws/control/tlsshared.py).

- Session-ticket keys: every `tls_tickets.rotation` a new key becomes the
  one that encrypts; the one before stays accepted for another rotation, so
  a ticket lives at least one rotation. The schedule is kept in the shared
  page itself (when the last key was published), so it survives a restart
  of the keeper and a reload.
- OCSP stapling: for every certificate of a site that staples, the response
  the operator keeps in `ocsp_file`, or one fetched from the responder named
  in the certificate, validated (scalws/control/ocsp.py) and published for
  the workers; refreshed before it expires. A response that fails validation
  is not published, and when the one published goes stale it is withdrawn:
  no staple is better than a wrong one. Each problem is logged once per
  change, not at every retry.

One keeper runs per generation of workers (its OCSP slots belong to that
generation); the master starts a new one on reload and stops the old one
with TERM. Signals stay blocked (inherited from the master); the keeper
sleeps in sigtimedwait, so a TERM never interrupts a write to shared memory.
"""
from __future__ import annotations

import os
import signal
import struct
import time
import traceback

from scalws.control import forkcall, forkmem, procs, profiles, title
from scalws.control.logs import NOTICE, log

TYPE_CHECKING = False  # typing is not imported at run time (a worker's memory)
if TYPE_CHECKING:
    from typing import NoReturn

STOP = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}
RETRY_MIN = 10.0           # after a failed fetch, first retry; doubles up to RETRY_MAX
RETRY_MAX = 300.0
TICKET_KEY = 80


class _Staple:
    """One certificate's OCSP state."""

    def __init__(self, slot, site_index, cert):
        self.slot = slot
        self.site_index = site_index
        self.cert = cert                  # config.model.Certificate
        self.pem = None                   # its file, read once (the one the workers serve)
        self.due = 0.0                    # wall time of the next attempt
        self.expires = 0.0                # next_update of what is published; 0: nothing
        self.retry = RETRY_MIN
        self.last_problem = None


class Keeper:
    def __init__(self, config, generation, publish_ticket, publish_ocsp):
        self.config = config
        self.gen = generation
        self.publish_ticket = publish_ticket
        self.publish_ocsp = publish_ocsp
        self.staples = [_Staple(*item) for item in generation.ocsp_certs]
        self.files_published = False

    # ---- tickets -----------------------------------------------------------
    def tickets_due(self, now) -> float:
        t = self.config.tickets
        if not t.enabled or self.gen.tickets is None:
            return float("inf")
        if t.keys:
            # The operator's keys (tls_tickets.key_file): the previous one,
            # then the one that encrypts; again with each generation (a HUP
            # after the files were replaced), never rotated here.
            if not self.files_published:
                for key in reversed(t.keys):
                    self.publish_ticket(self.gen.tickets, key, int(t.rotation), int(now))
                self.files_published = True
                log.info("TLS session ticket keys from %s", ", ".join(t.key_file))
            return float("inf")
        rotated = struct.unpack_from("<q", self.gen.tickets, 16)[0]  # sws_ticket_shm_t.rotated
        due = rotated + t.rotation
        if now >= due:
            self.publish_ticket(self.gen.tickets, os.urandom(TICKET_KEY),
                                int(t.rotation), int(now))
            log.info("TLS session ticket key rotated (next in %gs)", t.rotation)
            due = now + t.rotation
        return due

    # ---- OCSP --------------------------------------------------------------
    def _problem(self, st, level, message):
        if message != st.last_problem:
            log.log(level, "OCSP for %s: %s", st.cert.cert, message)
            st.last_problem = message

    def refresh(self, st, now) -> None:
        # The work needs cryptography: done in a throwaway child, so that the
        # keeper (a process for the server's whole life) stays small
        # (scalws/control/forkcall.py).
        if st.pem is None:
            try:
                with open(st.cert.cert, "rb") as f:
                    st.pem = f.read()
            except OSError as exc:
                self._problem(st, 40, f"cannot read the certificate: {exc}")
                st.due = now + RETRY_MAX
                return
        try:
            outcome = forkcall.call(attempt, st.cert, st.pem, now)
        except forkcall.ChildFailed as exc:
            outcome = ("error", f"the OCSP attempt failed: {exc}")
        kind = outcome[0]
        if kind == "skip":  # nothing to staple, or nothing to staple with: no retry
            _, level, message, retry = outcome
            self._problem(st, level, message)
            st.due = now + RETRY_MAX if retry else float("inf")
            return
        if kind == "error":
            self._problem(st, 40, f"{outcome[1]}; " + (
                "the response published before stays until it expires"
                if st.expires > now else "not stapled"))
            st.due = now + st.retry
            st.retry = min(st.retry * 2, RETRY_MAX)
            return
        _, der, next_update, cert_status, refresh_at, source = outcome
        expires = next_update or (now + 3600.0)
        self.publish_ocsp(self.gen.ocsp, st.slot, der, int(expires))
        st.expires = expires
        st.retry = RETRY_MIN
        if cert_status != "good":
            self._problem(st, 40, f"the responder says the certificate is {cert_status}; "
                          "stapled as it is")
        elif st.last_problem is not None or st.due == 0.0:
            log.log(NOTICE, "OCSP for %s: stapling a response from %s valid until %s",
                    st.cert.cert, source, time.strftime("%Y-%m-%d %H:%M:%S",
                                                        time.gmtime(expires)))
            st.last_problem = None
        st.due = refresh_at
        if st.cert.ocsp_file:
            # The operator replaces the file: look again at least every minute.
            st.due = min(st.due, now + 60.0)

    def expire(self, now) -> None:
        for st in self.staples:
            if st.expires and now >= st.expires:
                self.publish_ocsp(self.gen.ocsp, st.slot, b"", 0)
                st.expires = 0.0
                self._problem(st, 40, "the stapled response expired and no fresh one could "
                              "be had: not stapled")

    # ---- the loop ----------------------------------------------------------
    def round(self) -> float:
        """Does what is due; returns the wall time of the next thing due."""
        now = time.time()
        due = self.tickets_due(now)
        self.expire(now)
        for st in self.staples:
            if now >= st.due:
                self.refresh(st, now)
            due = min(due, st.due, st.expires or float("inf"))
        return due

    def run(self, ready_fd=None) -> None:
        due = self.round()
        if ready_fd is not None:
            os.write(ready_fd, b"R")
            os.close(ready_fd)
        forkmem.drop_load_pages()  # the start-up's library pages (as a worker's)
        while True:
            timeout = max(0.05, min(due - time.time(), 3600.0))
            if signal.sigtimedwait(STOP, timeout) is not None:
                return
            due = self.round()


def attempt(cert, pem, now):
    """In a child of the keeper: one OCSP attempt for `cert`
    (config.model.Certificate), whose file held `pem`, as plain data:
      ("skip", level, message, retry)   nothing stapled (retry: after RETRY_MAX)
      ("error", message)                a response could not be had or failed its checks
      ("ok", der, next_update, cert_status, refresh_at, source)"""
    title.set_title("scalwsd: TLS keeper (OCSP)", "scalwsd-ocsp")
    from cryptography import x509
    from scalws.control import ocsp
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        return ("skip", 40, f"cannot read the certificate: {exc}", True)
    leaf, issuer = chain[0], (chain[1] if len(chain) > 1 else None)
    # Nothing to staple is no problem (a self-signed certificate, one that
    # names no responder): a notice, as docs/configuration.md says. A
    # certificate that names one but comes without its issuer is.
    url = None
    if not cert.ocsp_file:
        url = cert.ocsp_url or ocsp.responder_url(leaf)
        if not url:
            return ("skip", NOTICE, "the certificate names no OCSP responder and no "
                    "ocsp_file is given: not stapled", False)
        if leaf.issuer == leaf.subject:
            return ("skip", NOTICE, "the certificate is self-signed: not stapled", False)
    if issuer is None:
        return ("skip", 30, "the certificate file has no issuer certificate after the "
                "leaf, which OCSP needs: not stapled", False)
    try:
        if cert.ocsp_file:
            result = ocsp.load_file(cert.ocsp_file, leaf, issuer, now=now)
            source = cert.ocsp_file
        else:
            der = ocsp.fetch(url, ocsp.build_request(leaf, issuer))
            result = ocsp.validate(der, leaf, issuer, now=now)
            source = url
    except ocsp.OcspError as exc:
        return ("error", str(exc))
    return ("ok", result.der, result.next_update, result.cert_status,
            ocsp.refresh_at(result, now), source)


def run(config, generation, errlog, ready_fd, master=0) -> "NoReturn":
    """In the forked child: keep the memory until TERM (or the death of the
    master, `master`'s pid: the same TERM); never returns."""
    code = 0
    try:
        errlog.set_worker("tls")
        if master and not procs.follow_parent(signal.SIGTERM, master):
            return
        from scalws.server.engine import ocsp_publish, ticket_publish
        profiles.prepare()
        Keeper(config, generation, ticket_publish, ocsp_publish).run(ready_fd)
    except BaseException:
        try:
            log.critical("the TLS keeper failed:\n%s", traceback.format_exc())
        finally:
            code = 1
    finally:
        profiles.dump()  # a PGO training build's counters: os._exit skips them
        os._exit(code)
