"""The response cache end to end (issue 17): a real scalwsd with cache
zones in front of a real HTTP origin (tests/e2e/upstreams/cacheorigin.py)
and real PHP-FPM, talked to with http.client and curl.

Waiting for time to pass is the behaviour under test in the freshness
tests (an entry goes stale after max-age seconds); everything else waits
on a condition.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.upstreams.cacheorigin import Origin

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.stop()


def as_yaml(cfg) -> str:
    """A config for the `server` fixture (JSON is YAML; braces doubled for
    its str.format, @PORT@ becomes {port})."""
    text = json.dumps(cfg, indent=2)
    return text.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}")


def cache_yaml(origin_port, cache=None, workers=2, zone="16m", top=None):
    c = {"zone": "z", "purge": {"allow": ["127.0.0.1/32"]}, **(cache or {})}
    return as_yaml({
        "workers": workers, **(top or {}),
        "cache_zones": {"z": {"max_size": zone}},
        "sites": [{"listen": ["127.0.0.1:@PORT@"], "routes": [
            {"path": "/", "proxy": {"url": f"http://127.0.0.1:{origin_port}", "cache": c}}]}]})


class R:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def h(self, name):
        return self.headers.get(name.lower())

    @property
    def cs(self):
        return self.h("cache-status") or ""


def req(port, target, method="GET", headers=None, body=None, source="127.0.0.1", conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=20,
                                           source_address=(source, 0))
    c.request(method, target, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    out = R(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    if conn is None:
        c.close()
    return out


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def q(**kw):
    return "?" + urllib.parse.urlencode(kw)


# ---- storing and hitting -----------------------------------------------------------

def test_a_miss_is_stored_and_every_worker_hits_it(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/a" + q(cc="max-age=100")
    first = req(s.port, t)
    assert first.status == 200 and "fwd=miss" in first.cs and "stored" in first.cs
    assert first.h("age") is None
    # new connections: SO_REUSEPORT spreads them over both workers
    for _ in range(40):
        r = req(s.port, t)
        assert r.status == 200 and r.body == first.body
        assert r.cs.startswith("scalws; hit"), r.cs
        assert int(r.h("age")) >= 0
    assert origin.count(t) == 1


def test_large_bodies_are_sent_from_the_store(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/big" + q(cc="max-age=100", size=3 << 20)
    a = req(s.port, t)
    b = req(s.port, t)
    assert a.body == b.body and len(b.body) == 3 << 20
    assert "hit" in b.cs and origin.count(t) == 1


def test_responses_that_must_not_be_stored(server, origin):
    s = server(cache_yaml(origin.port))
    for t in ["/ns" + q(cc="no-store"), "/pv" + q(cc="private, max-age=100"),
              "/ck" + q(cc="max-age=100", cookie=1), "/vs" + q(cc="max-age=100", vary="*"),
              "/st" + q(status=500, lm=1), "/none",
              "/mu" + q(cc="max-age=100, must-understand", status=599)]:
        req(s.port, t)
        r = req(s.port, t)
        assert "fwd=" in r.cs and "stored" not in r.cs, (t, r.cs)
        assert origin.count(t) == 2, t


def test_expires_and_heuristic_freshness(server, origin):
    s = server(cache_yaml(origin.port))
    for t in ["/ex" + q(expires=100), "/lm" + q(lm=1)]:
        req(s.port, t)
        assert "hit" in req(s.port, t).cs, t
        assert origin.count(t) == 1
    # explicit freshness makes any final status storable; must-understand
    # stores a status we understand even with no-store
    for t in ["/e500" + q(cc="max-age=100", status=500),
              "/mu404" + q(cc="max-age=100, must-understand, no-store", status=404)]:
        req(s.port, t)
        assert "hit" in req(s.port, t).cs, t
    # Expires in the past: stored stale, never a hit
    t = "/old" + q(expires=-100)
    req(s.port, t)
    assert "hit" not in req(s.port, t).cs


def test_valid_gives_freshness_to_responses_without_any(server, origin):
    s = server(cache_yaml(origin.port, {"valid": {"200": "1m", "404": "1m"}}))
    for t in ["/v", "/v404" + q(status=404)]:
        req(s.port, t)
        assert "hit" in req(s.port, t).cs, t


def test_vary_keeps_a_variant_per_value(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/vary" + q(cc="max-age=100", vary="Accept-Language")
    fr = req(s.port, t, headers={"Accept-Language": "fr"})
    de = req(s.port, t, headers={"Accept-Language": "de"})
    assert b"fr" in fr.body and b"de" in de.body
    for lang, want in (("fr", fr.body), ("de", de.body)):
        r = req(s.port, t, headers={"Accept-Language": lang})
        assert "hit" in r.cs and r.body == want
    none = req(s.port, t)
    assert "vary-miss" in none.cs
    assert origin.count(t) == 3


def test_vary_values_compare_as_rfc9111_lets_a_cache(server, origin):
    """RFC 9111 §4.1: values that differ only in the whitespace around list
    members, in the case of case-insensitive ones (content-codings), in empty
    members, or in being one field line or two, select the same variant;
    another order or another member does not (no reordering is assumed)."""
    s = server(cache_yaml(origin.port))
    t = "/vn" + q(cc="max-age=100", vary="Accept-Encoding")
    assert "stored" in req(s.port, t, headers={"Accept-Encoding": "gzip, br"}).cs
    for same in ("gzip,br", " GZIP ,\tBr ", "gzip,, br,"):
        r = req(s.port, t, headers={"Accept-Encoding": same})
        assert "hit" in r.cs, (same, r.cs)
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
    c.putrequest("GET", t, skip_accept_encoding=True)
    c.putheader("Accept-Encoding", "gzip")
    c.putheader("Accept-Encoding", "br")
    c.endheaders()
    r = c.getresponse()
    r.read()
    c.close()
    assert "hit" in (r.getheader("Cache-Status") or ""), r.getheaders()
    for other in ("br, gzip", "gzip", "gzip, br;q=0.5"):
        r = req(s.port, t, headers={"Accept-Encoding": other})
        assert "hit" not in r.cs, (other, r.cs)
    assert origin.count(t) == 4


def test_authorization_requests_use_only_public_responses(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/priv" + q(cc="max-age=100")
    req(s.port, t)
    r = req(s.port, t, headers={"Authorization": "Bearer x"})
    assert "hit" not in r.cs
    t = "/pub" + q(cc="public, max-age=100")
    req(s.port, t, headers={"Authorization": "Bearer x"})
    assert "hit" in req(s.port, t, headers={"Authorization": "Bearer y"}).cs
    assert origin.count(t) == 1


def test_head_conditional_and_range_answered_from_the_store(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/doc" + q(cc="max-age=100", etag="v1", lm=1, size=10000)
    full = req(s.port, t)
    head = req(s.port, t, method="HEAD")
    assert head.status == 200 and head.body == b"" and head.h("content-length") == "10000"
    assert "hit" in head.cs
    nm = req(s.port, t, headers={"If-None-Match": '"v1"'})
    assert nm.status == 304 and nm.body == b"" and nm.h("etag") == '"v1"' and "hit" in nm.cs
    ims = req(s.port, t, headers={"If-Modified-Since": full.h("last-modified")})
    assert ims.status == 304
    rg = req(s.port, t, headers={"Range": "bytes=100-199"})
    assert rg.status == 206 and rg.body == full.body[100:200]
    assert rg.h("content-range") == "bytes 100-199/10000"
    bad = req(s.port, t, headers={"Range": "bytes=20000-"})
    assert bad.status == 416
    assert origin.count(t) == 1


def test_request_directives(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/rd" + q(cc="max-age=100", etag="e")
    req(s.port, t)
    # no-cache: revalidated with the origin (which answers 304), then served
    r = req(s.port, t, headers={"Cache-Control": "no-cache"})
    assert r.status == 200 and "fwd=request" in r.cs
    assert origin.requests(t)[-1][1].get("If-None-Match") == '"e"'
    # only-if-cached on something never fetched
    r = req(s.port, "/never", headers={"Cache-Control": "only-if-cached"})
    assert r.status == 504 and origin.count("/never") == 0
    # no-store: the answer is not kept
    t2 = "/rns" + q(cc="max-age=100")
    req(s.port, t2, headers={"Cache-Control": "no-store"})
    assert "hit" not in req(s.port, t2).cs


# ---- Age (RFC 9111 5.1) ---------------------------------------------------------------

def qs(*fields, **kw):
    """q(), plus response fields the origin sends as given (set=Name:Value)."""
    return "?" + urllib.parse.urlencode(list(kw.items()) + [("set", f) for f in fields])


# The Age lines an origin sends, and the age the cache takes from them:
# a list counts by its first member, several lines by the first line's; an
# invalid first member is ignored (as if absent: the age is then the time
# since Date, 0 here).
AGE_FORMS = [
    (["30"], 30),
    (["30, 500"], 30),
    (["30,500"], 30),
    (["30", "500"], 30),
    (["0,7200"], 0),
    (["0", "7200"], 0),
    ([" , 30"], 30),
    (["abc"], None),
    (["-1"], None),
    (["1.5"], None),
    (["1 2"], None),
    (["10abc"], None),
    (["7200;foo=bar"], None),
    ([""], None),
    (["abc", "30"], None),
]


def test_age_forms_the_cache_reads_are_hits_with_the_age_they_give(server, origin):
    s = server(cache_yaml(origin.port))
    for i, (lines, age) in enumerate(AGE_FORMS):
        t = f"/age{i}" + qs(*[f"Age:{v}" for v in lines], cc="max-age=60")
        first = req(s.port, t)
        assert "fwd=miss" in first.cs and "stored" in first.cs, (lines, first.cs)
        hit = req(s.port, t)
        assert hit.cs.startswith("scalws; hit"), (lines, hit.cs)
        assert origin.count(t) == 1, lines
        # the age the client gets is the cache's own: the origin's first
        # member plus the time since, or the time since Date alone
        lo = age or 0
        assert lo <= int(hit.h("age")) <= lo + 3, (lines, hit.h("age"))
        # what is left of max-age=60 agrees
        # (a hit of another worker's fill still in flight says "collapsed")
        ttl = int(re.search(r"; ttl=(-?\d+)", hit.cs).group(1))
        assert 60 - lo - 3 <= ttl <= 60 - lo, (lines, hit.cs)


def test_an_age_past_the_lifetime_is_stale_and_a_huge_one_is_clamped(server, origin):
    s = server(cache_yaml(origin.port))
    for i, lines in enumerate([["7200, 0"], ["7200", "0"], ["99999999999999999999"],
                               ["2147483648"]]):
        t = f"/aged{i}" + qs(*[f"Age:{v}" for v in lines], cc="max-age=60", etag=f"a{i}")
        first = req(s.port, t)
        assert "stored" in first.cs, (lines, first.cs)
        r = req(s.port, t)
        assert "fwd=stale" in r.cs and "fwd-status=304" in r.cs, (lines, r.cs)
        assert origin.count(t) == 2, lines
    # an age of 2^31 (RFC 9111 1.2.2) is still older than 2^31 - 1 of max-age
    t = "/agemax" + qs("Age:99999999999999999999", cc="max-age=2147483647")
    req(s.port, t)
    assert "fwd=stale" in req(s.port, t).cs


# ---- targeted fields (RFC 9213) ---------------------------------------------------------

def test_cdn_cache_control_overrides_cache_control_both_ways(server, origin):
    s = server(cache_yaml(origin.port))
    # CDN-Cache-Control forbids what Cache-Control allows: not stored, or
    # not reused without the origin
    for i, cdn in enumerate(["no-store", "private", 'private="set-cookie"']):
        t = f"/cdnns{i}" + qs(f"CDN-Cache-Control:{cdn}", cc="max-age=600", expires=600)
        first = req(s.port, t)
        assert "stored" not in first.cs, (cdn, first.cs)
        assert first.h("cdn-cache-control") == cdn  # passed through by default
        r = req(s.port, t)
        assert "fwd=miss" in r.cs and "stored" not in r.cs, (cdn, r.cs)
        assert origin.count(t) == 2, cdn
    # no-cache: stored, but revalidated before each use
    t = "/cdnnc" + qs("CDN-Cache-Control:no-cache", cc="max-age=600", etag="nc")
    req(s.port, t)
    r = req(s.port, t)
    assert "fwd=stale" in r.cs and "fwd-status=304" in r.cs, r.cs
    assert origin.requests(t)[-1][1].get("If-None-Match") == '"nc"'
    # CDN-Cache-Control allows what Cache-Control forbids: stored, a hit,
    # and the client still gets Cache-Control: no-store
    for i, cc in enumerate(["no-store", "private", "no-cache", "max-age=0"]):
        t = f"/cdnok{i}" + qs("CDN-Cache-Control:max-age=60", cc=cc)
        first = req(s.port, t)
        assert "stored" in first.cs, (cc, first.cs)
        hit = req(s.port, t)
        assert hit.cs.startswith("scalws; hit"), (cc, hit.cs)
        assert hit.h("cache-control") == cc and hit.h("cdn-cache-control") == "max-age=60"
        assert origin.count(t) == 1, cc
    # Expires is ignored too: a past one does not make it stale
    t = "/cdnexp" + qs("CDN-Cache-Control:max-age=60", expires=-100)
    req(s.port, t)
    assert "hit" in req(s.port, t).cs


def test_cdn_cache_control_max_age_replaces_a_longer_one(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/cdnshort" + qs("CDN-Cache-Control:max-age=1", cc="max-age=600", etag="s")
    req(s.port, t)
    time.sleep(2.2)  # the behaviour under test: CDN-Cache-Control's max-age passes
    r = req(s.port, t)
    assert "fwd=stale" in r.cs, r.cs
    assert origin.count(t) == 2


def test_an_invalid_cdn_cache_control_is_ignored_whole(server, origin):
    s = server(cache_yaml(origin.port))
    # not a Dictionary, or a directive of the wrong type: Cache-Control rules
    for i, cdn in enumerate(['max-age="60"', "max-age=60, &&&", "max-age =60", "MAX-AGE=60",
                             "max-age=1.5", "max-age=60,"]):
        t = f"/cdnbad{i}" + qs(f"CDN-Cache-Control:{cdn}", cc="no-store")
        req(s.port, t)
        r = req(s.port, t)
        assert "stored" not in r.cs and "hit" not in r.cs, (cdn, r.cs)
        assert origin.count(t) == 2, cdn
    for i, cdn in enumerate(['no-store="x"', "no-store, &&&", "no-store=1"]):
        t = f"/cdnbadok{i}" + qs(f"CDN-Cache-Control:{cdn}", cc="max-age=600")
        req(s.port, t)
        assert "hit" in req(s.port, t).cs, cdn
        assert origin.count(t) == 1, cdn
    # an empty one is no policy either
    t = "/cdnempty" + qs("CDN-Cache-Control:", cc="max-age=600")
    req(s.port, t)
    assert "hit" in req(s.port, t).cs


def test_cdn_cache_control_on_two_lines_is_one_dictionary(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/cdn2" + qs("CDN-Cache-Control:no-store", "CDN-Cache-Control:no-store=?0, max-age=60",
                     cc="no-store")
    req(s.port, t)
    assert "hit" in req(s.port, t).cs
    t = "/cdn2bad" + qs("CDN-Cache-Control:max-age=60", "CDN-Cache-Control:&", cc="no-store")
    req(s.port, t)
    assert "hit" not in req(s.port, t).cs and origin.count(t) == 2


def test_the_routes_own_targeted_field_comes_first_and_is_removed(server, origin):
    s = server(cache_yaml(origin.port, {"targeted_field": "ScalWS-Cache-Control"}))
    # ours allows, CDN-Cache-Control and Cache-Control forbid: stored
    t = "/own" + qs("ScalWS-Cache-Control:max-age=60", "CDN-Cache-Control:no-store",
                    cc="no-store")
    first = req(s.port, t)
    assert "stored" in first.cs
    hit = req(s.port, t)
    assert hit.cs.startswith("scalws; hit") and origin.count(t) == 1
    for r in (first, hit):  # ours is for us alone; CDN-Cache-Control goes on
        assert r.h("scalws-cache-control") is None
        assert r.h("cdn-cache-control") == "no-store" and r.h("cache-control") == "no-store"
    # ours forbids, CDN-Cache-Control allows: not stored
    t = "/ownns" + qs("ScalWS-Cache-Control:no-store", "CDN-Cache-Control:max-age=60",
                      cc="max-age=60")
    req(s.port, t)
    assert "fwd=miss" in req(s.port, t).cs and origin.count(t) == 2
    # ours invalid: CDN-Cache-Control is next
    t = "/ownbad" + qs('ScalWS-Cache-Control:max-age="60"', "CDN-Cache-Control:max-age=60",
                       cc="no-store")
    req(s.port, t)
    assert "hit" in req(s.port, t).cs and origin.count(t) == 1


def test_remove_targeted_and_cdn_cache_control_off(server, origin):
    # CDN-Cache-Control removed from what clients get, still obeyed; ours kept
    s = server(cache_yaml(origin.port, {"targeted_field": "X-Our-CC",
                                        "remove_targeted": ["CDN-Cache-Control"]}))
    t = "/rm" + qs("CDN-Cache-Control:max-age=60", cc="no-store")
    first = req(s.port, t)
    hit = req(s.port, t)
    assert "stored" in first.cs and hit.cs.startswith("scalws; hit")
    assert first.h("cdn-cache-control") is None and hit.h("cdn-cache-control") is None
    t = "/rmown" + qs("X-Our-CC:max-age=60", "CDN-Cache-Control:no-store", cc="no-store")
    first = req(s.port, t)
    hit = req(s.port, t)
    assert "stored" in first.cs and hit.cs.startswith("scalws; hit")
    for r in (first, hit):
        assert r.h("cdn-cache-control") is None and r.h("x-our-cc") == "max-age=60"
    # ours removed (the default): on a hit too
    s2 = server(cache_yaml(origin.port, {"targeted_field": "X-Our-CC"}))
    t = "/rm2" + qs("X-Our-CC:max-age=60", cc="private")
    first, hit = req(s2.port, t), req(s2.port, t)
    assert "hit" in hit.cs
    assert first.h("x-our-cc") is None and hit.h("x-our-cc") is None
    # cdn_cache_control: off: CDN-Cache-Control is not ours, passed through unread
    s3 = server(cache_yaml(origin.port, {"cdn_cache_control": False}))
    t = "/off" + qs("CDN-Cache-Control:no-store", cc="max-age=60")
    first, hit = req(s3.port, t), req(s3.port, t)
    assert "hit" in hit.cs and hit.h("cdn-cache-control") == "no-store"


# ---- staleness ----------------------------------------------------------------------

def test_stale_entries_are_revalidated_and_refreshed(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/rv" + q(cc="max-age=3", etag="v1")
    first = req(s.port, t)
    time.sleep(3.2)  # the behaviour under test: max-age passes
    r = req(s.port, t)
    assert r.status == 200 and r.body == first.body
    assert "fwd=stale" in r.cs and "fwd-status=304" in r.cs
    assert origin.requests(t)[-1][1].get("If-None-Match") == '"v1"'
    # refreshed: fresh again, a hit
    assert "hit" in req(s.port, t).cs
    assert origin.count(t) == 2


def test_stale_while_revalidate_answers_at_once_and_refreshes_once(server, origin):
    s = server(cache_yaml(origin.port))
    # max-age=3: the refreshed entry is fresh for at least 2 s (ages are
    # whole seconds, and the origin's Date may lag by one)
    t = "/swr" + q(cc="max-age=3, stale-while-revalidate=60", sleep=0.3)
    first = req(s.port, t)
    time.sleep(3.2)
    t0 = time.monotonic()
    rs = [req(s.port, t) for _ in range(5)]
    assert time.monotonic() - t0 < 1.0  # none of them waited for the slow origin
    assert all("stale-while-revalidate" in r.cs for r in rs[:1])
    assert all(r.body == first.body for r in rs)
    wait_for(lambda: origin.count(t) == 2)
    wait_for(lambda: "hit; ttl" in req(s.port, t).cs)
    assert origin.count(t) == 2  # one refresh for all of them


def test_a_background_revalidation_answered_304_renews_the_entry(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/swr304" + q(cc="max-age=3, stale-while-revalidate=60", etag="v")
    first = req(s.port, t)
    time.sleep(3.2)
    assert "stale-while-revalidate" in req(s.port, t).cs
    wait_for(lambda: origin.count(t) == 2)
    assert origin.requests(t)[-1][1].get("If-None-Match") == '"v"'  # conditional: a 304 came back
    wait_for(lambda: "hit; ttl" in req(s.port, t).cs)
    r = req(s.port, t)
    assert r.body == first.body and origin.count(t) == 2


def test_stale_if_error_on_5xx_and_on_a_dead_origin(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/sie" + q(cc="max-age=1, stale-if-error=60")
    first = req(s.port, t)
    time.sleep(1.5)
    origin.fail.add("/sie")
    r = req(s.port, t)
    assert r.status == 200 and r.body == first.body and "stale-if-error" in r.cs
    origin.stop()  # refused from now on
    r = req(s.port, t)
    assert r.status == 200 and r.body == first.body and "stale-if-error" in r.cs
    # without stale-if-error: the error passes
    assert req(s.port, "/gone").status == 502


def test_route_default_stale_if_error(server, origin):
    s = server(cache_yaml(origin.port, {"stale": {"if_error": "1m"}}))
    t = "/rsie" + q(cc="max-age=1")
    req(s.port, t)
    time.sleep(1.5)
    origin.fail.add("/rsie")
    r = req(s.port, t)
    assert r.status == 200 and "stale-if-error" in r.cs


def test_our_own_error_pages_are_never_stored(server, origin):
    s = server(cache_yaml(origin.port, {"valid": {"any": "1m"}}))
    origin.stop()  # every fetch fails: the proxy answers 502 itself
    a = req(s.port, "/down")
    b = req(s.port, "/down")
    assert a.status == b.status == 502
    assert "stored" not in a.cs and "hit" not in b.cs


def test_must_revalidate_is_never_served_stale(server, origin):
    s = server(cache_yaml(origin.port, {"stale": {"if_error": "1m"}}))
    t = "/mr" + q(cc="max-age=1, must-revalidate")
    req(s.port, t)
    time.sleep(1.5)
    origin.fail.add("/mr")
    assert req(s.port, t).status == 500


# ---- collapsed misses ---------------------------------------------------------------

def test_concurrent_misses_send_one_request_upstream(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/slow" + q(cc="max-age=100", sleep=0.5)
    with ThreadPoolExecutor(100) as ex:
        rs = list(ex.map(lambda _: req(s.port, t), range(100)))
    assert all(r.status == 200 and r.body == rs[0].body for r in rs)
    assert origin.count(t) == 1
    assert sum("collapsed" in r.cs for r in rs) >= 50


def test_waiters_go_upstream_when_the_answer_cannot_be_stored(server, origin):
    s = server(cache_yaml(origin.port, {"lock": {"timeout": "30s"}}))
    t = "/nocache" + q(cc="no-store", sleep=0.3)
    t0 = time.monotonic()
    with ThreadPoolExecutor(10) as ex:
        rs = list(ex.map(lambda _: req(s.port, t), range(10)))
    assert all(r.status == 200 for r in rs)
    # not one at a time (10 x 0.3 s), and nobody waited for the 30 s lock
    assert time.monotonic() - t0 < 2.5


def test_a_worker_killed_mid_fill_leaves_the_store_usable(server, origin):
    s = server(cache_yaml(origin.port, {"lock": {"timeout": "30s"}}, workers=1))
    s.expect_crashes = True
    t = "/trickle" + q(cc="max-age=100", size=4 << 20, trickle=0.2)
    c = socket.create_connection(("127.0.0.1", s.port))
    c.sendall(f"GET {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    wait_for(lambda: origin.count(t) == 1)
    c.recv(1000)  # the head and the first bytes went out: mid-fill
    [w] = s.workers()
    os.kill(w, signal.SIGKILL)
    c.close()
    s.wait_log("restarting", timeout=10)
    wait_for(lambda: s.workers() and s.workers() != [w])
    t0 = time.monotonic()
    t2 = "/after" + q(cc="max-age=100")
    assert req(s.port, t2).status == 200 and "hit" in req(s.port, t2).cs
    # the dead filler's lock is gone: a new fill, no 30 s wait
    r = req(s.port, "/trickle" + q(cc="max-age=100", size=4 << 20, trickle=0.0))
    assert r.status == 200 and len(r.body) == 4 << 20
    assert time.monotonic() - t0 < 10


# ---- purge and invalidation ---------------------------------------------------------

def test_purge_url_prefix_and_tags(server, origin):
    s = server(cache_yaml(origin.port))
    ts = ["/p/a" + q(cc="max-age=100", tag="red"), "/p/b" + q(cc="max-age=100", tag="blue green"),
          "/q/c" + q(cc="max-age=100", tag="green")]
    for t in ts:
        req(s.port, t)
        assert "hit" in req(s.port, t).cs
    r = req(s.port, ts[0], method="PURGE")
    assert r.status == 200 and json.loads(r.body) == {"purged": 1}
    assert "hit" not in req(s.port, ts[0]).cs
    assert req(s.port, "/nothing", method="PURGE").status == 404
    r = req(s.port, "/p/*", method="PURGE")
    assert json.loads(r.body)["purged"] == 2  # /p/a (fetched again) and /p/b
    assert "hit" in req(s.port, ts[2]).cs
    r = req(s.port, "/", method="PURGE", headers={"Cache-Tag": "green"})
    assert json.loads(r.body)["purged"] == 1
    assert "hit" not in req(s.port, ts[2]).cs


def test_purge_from_other_addresses_is_refused(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/keep" + q(cc="max-age=100")
    req(s.port, t)
    r = req(s.port, t, method="PURGE", source="127.0.0.3")
    assert r.status == 403
    assert "hit" in req(s.port, t).cs


def test_unsafe_methods_invalidate(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/inv" + q(cc="max-age=100")
    req(s.port, t)
    assert "hit" in req(s.port, t).cs
    post = req(s.port, t, method="POST", body=b"x")
    assert post.status == 200 and post.cs == "scalws; fwd=method; fwd-status=200"
    assert "hit" not in req(s.port, t).cs
    # an error answer does not invalidate
    req(s.port, t)
    origin.fail.add("/inv")
    assert req(s.port, t, method="DELETE").status == 500
    assert "hit" in req(s.port, t).cs


# ---- limits, eviction, reloads --------------------------------------------------------

def test_objects_over_max_object_size_pass_through(server, origin):
    s = server(cache_yaml(origin.port, {"max_object_size": "64k"}))
    t = "/huge" + q(cc="max-age=100", size=100000)
    assert len(req(s.port, t).body) == 100000
    r = req(s.port, t)
    assert "hit" not in r.cs and len(r.body) == 100000


def test_a_full_zone_evicts_and_keeps_answering(server, origin):
    s = server(cache_yaml(origin.port, zone="2m", workers=1))
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
    for i in range(60):
        r = req(s.port, f"/e{i}" + q(cc="max-age=100", size=100000), conn=conn)
        assert r.status == 200 and len(r.body) == 100000
    # the latest ones are there, the first ones were evicted
    assert "hit" in req(s.port, "/e59" + q(cc="max-age=100", size=100000)).cs
    assert "hit" not in req(s.port, "/e0" + q(cc="max-age=100", size=100000)).cs


def test_entries_survive_a_reload(server, origin):
    s = server(cache_yaml(origin.port))
    t = "/reload" + q(cc="max-age=100")
    req(s.port, t)
    s.kill(signal.SIGHUP)
    s.wait_log("reloaded", timeout=15)
    assert "hit" in req(s.port, t).cs
    assert origin.count(t) == 1


def zone_memfds(pid):
    """The names of the cache zones whose memfds process pid holds (each
    one twice in the master: its own descriptor and the mapping's dup)."""
    names = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("/memfd:scalws-cache:"):
            names.append(target[len("/memfd:scalws-cache:"):].removesuffix(" (deleted)"))
    return sorted(set(names))


def test_a_failed_reload_gives_back_the_zones_it_made(server, origin, tmp_path):
    """A reload that fails after the new configuration's zones were made
    (here: its counters file cannot be created) closes them; the zones of
    the configuration still served stay."""
    s = server(cache_yaml(origin.port, top={"status": {"file": str(tmp_path / "counters")}}))
    t = "/kept" + q(cc="max-age=100")
    req(s.port, t)
    assert zone_memfds(s.pid) == ["z"]
    (tmp_path / "a-directory").mkdir()
    with open(s.config_path) as f:
        good = f.read()
    bad = good.replace(str(tmp_path / "counters"), str(tmp_path / "a-directory"))
    bad = bad.replace('"cache_zones": {', '"cache_zones": {"new": {"max_size": "8m"},')
    assert bad.count("a-directory") == 1 and '"new"' in bad
    with open(s.config_path, "w") as f:
        f.write(bad)
    s.kill(signal.SIGHUP)
    s.wait_log("reload failed", timeout=15)
    assert "cannot create the counters file" in s.log()
    assert zone_memfds(s.pid) == ["z"]
    assert "hit" in req(s.port, t).cs  # the zone served before is untouched
    # the same zone, added by a reload that succeeds, is made again
    with open(s.config_path, "w") as f:
        f.write(bad.replace(str(tmp_path / "a-directory"), str(tmp_path / "counters")))
    s.kill(signal.SIGHUP)
    s.wait_log("reloaded", timeout=15)
    assert zone_memfds(s.pid) == ["new", "z"]
    assert "hit" in req(s.port, t).cs


# ---- FastCGI ------------------------------------------------------------------------------

def test_fastcgi_routes_are_cached(server, php_fpm, tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "t.php").write_text('<?php header("Cache-Control: max-age=100"); '
                                'echo "php ", getmypid(), " ", microtime(true);')
    fpm = php_fpm()
    s = server(as_yaml({
        "workers": 2, "cache_zones": {"z": {"max_size": "8m"}},
        "sites": [{"listen": ["127.0.0.1:@PORT@"], "routes": [
            {"path": "~ \\.php$", "fastcgi": {"connect": fpm.addr, "root": str(root),
                                              "cache": {"zone": "z"}}}]}]}))
    a = req(s.port, "/t.php")
    assert a.status == 200 and a.body.startswith(b"php ") and "stored" in a.cs
    for _ in range(5):
        b = req(s.port, "/t.php")
        assert b.body == a.body and "hit" in b.cs


# ---- counters ------------------------------------------------------------------------------

def test_zone_counters_in_status_and_metrics(server, origin):
    import urllib.request
    from tests.e2e.conftest import free_port
    sport = free_port()
    s = server(cache_yaml(origin.port, top={"status": {"listen": f"127.0.0.1:{sport}"}}))
    t = "/cnt" + q(cc="max-age=100")
    req(s.port, t)
    req(s.port, t)
    req(s.port, t)
    req(s.port, t, method="PURGE")
    st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{sport}/status").read())
    z = st["cache"]["z"]
    assert z["misses"] == 1 and z["hits"] == 2 and z["stored"] == 1 and z["purged"] == 1
    assert z["entries"] == 0 and z["mem_size"] > 15 << 20
    m = urllib.request.urlopen(f"http://127.0.0.1:{sport}/metrics").read().decode()
    assert 'scalws_cache_events_total{zone="z",event="hits"} 2' in m
    assert 'scalws_cache_entries{zone="z"} 0' in m
