"""The config half of TLS to upstreams (scalws/config/directives/proxy.py and
upstreams.py): https:// in `url` and in a group's servers, `tls:` on groups
and url routes; each accepted form, and each problem with its exact message
and FILE:LINE:COLUMN position (the file shown as F)."""
import pytest

from scalws.config.loader import load_config
from scalws.config.model import UpstreamTLS
from tests.unit.proxyconfiglib import (G, P, flow, group_problem, group_text, load_group,
                                       load_proxy, one, problems_of, route_problem, write)

# --------------------------------------------------------------------------
# TLS to upstreams: https:// in url and servers, `tls:` on groups and url routes

@pytest.fixture(scope="module")
def pems(tmp_path_factory):
    """A CA, a client certificate and its key, a key of another pair, and a
    file that is no PEM at all."""
    from tests.tlspki import PKI
    folder = tmp_path_factory.mktemp("pems")
    pki = PKI(folder)
    root = pki.root()
    client = pki.leaf(root, ["client.test"], server_auth=False, name="client")
    other = pki.leaf(root, ["other.test"], name="other")
    junk = folder / "junk.pem"
    junk.write_text("not a certificate\n")
    return {"ca": root.cert_path, "cert": client.cert_path, "key": client.key_path,
            "other_key": other.key_path, "junk": str(junk)}


def test_https_url_defaults(tmp_path):
    p, cfg = load_proxy(tmp_path, 'url: "https://localhost/v1/"\n')
    assert (p.upstream, p.path_prefix) == ("url:https://localhost:443", "/v1/")
    group = cfg.upstreams["url:https://localhost:443"]
    assert group.tls == UpstreamTLS(mark=group.tls.mark)
    t = group.tls
    assert (t.verify, t.ca, t.name, t.sni, t.cert, t.key, t.protocols) == \
        (True, None, None, True, None, None, ["TLSv1.2", "TLSv1.3"])
    assert {s.tls_name for s in group.servers} == {"localhost"}   # the host as written
    assert all(s.port == 443 for s in group.servers)


def test_https_url_every_tls_key(tmp_path, pems):
    p, cfg = load_proxy(tmp_path, f"""\
        url: "https://127.0.0.1:8443"
        tls:
          verify: on
          ca: {pems["ca"]}
          name: API.example.com.
          sni: off
          cert: {pems["cert"]}
          key: {pems["key"]}
          protocols: TLSv1.3
        """)
    t = cfg.upstreams[p.upstream].tls
    assert (t.verify, t.ca, t.name, t.sni, t.cert, t.key, t.protocols) == \
        (True, pems["ca"], "api.example.com", False, pems["cert"], pems["key"], ["TLSv1.3"])
    assert [s.tls_name for s in cfg.upstreams[p.upstream].servers] == ["api.example.com"]


def test_https_url_name_from_host_and_ip_literals(tmp_path):
    p, cfg = load_proxy(tmp_path, 'url: "https://127.0.0.1:8443"\nhost: "Api.Example.com:8443"\n')
    assert [s.tls_name for s in cfg.upstreams[p.upstream].servers] == ["api.example.com"]
    p, cfg = load_proxy(tmp_path, 'url: "https://[::1]:8443"\n')
    assert [s.tls_name for s in cfg.upstreams[p.upstream].servers] == ["::1"]


def test_verify_off_is_accepted_silently(tmp_path):
    p, cfg = load_proxy(tmp_path, 'url: "https://127.0.0.1:8443"\ntls: {verify: off}\n')
    assert cfg.upstreams[p.upstream].tls.verify is False
    assert cfg.warnings == []


def test_routes_share_an_https_group_when_they_verify_alike(tmp_path, pems):
    text = flow('"https://127.0.0.1:1/a"') + (
        "      - {path: /b, proxy: {url: \"https://127.0.0.1:1/b\"}}\n"
        f"      - {{path: /c, proxy: {{url: \"https://127.0.0.1:1\", tls: {{ca: {pems['ca']}}}}}}}\n"
        "      - {path: /d, proxy: \"http://127.0.0.1:1\"}\n")
    cfg = load_config(write(tmp_path, text))
    assert [r.handler.upstream for r in cfg.sites[0].routes] == [
        "url:https://127.0.0.1:1", "url:https://127.0.0.1:1", "url:https://127.0.0.1:1#2",
        "url:127.0.0.1:1"]
    assert cfg.upstreams["url:https://127.0.0.1:1#2"].tls.ca == pems["ca"]
    assert cfg.upstreams["url:127.0.0.1:1"].tls is None


def test_group_https_servers(tmp_path, pems):
    group = load_group(tmp_path, f"""\
        servers: [{{address: "https://[::1]:8443", weight: 2}}, "https://localhost"]
        tls: {{ca: {pems["ca"]}}}
        """)
    assert group.tls.ca == pems["ca"]
    assert [(s.host, s.port, s.tls_name, s.weight) for s in group.servers][:2] == [
        ("::1", 8443, "::1", 2), ("127.0.0.1", 443, "localhost", 1)]


def test_group_https_servers_alone_and_tls_on(tmp_path):
    group = load_group(tmp_path, 'servers: ["https://127.0.0.1:8443"]\n')
    assert group.tls is not None and group.tls.verify
    group = load_group(tmp_path, 'servers: ["localhost:8443"]\ntls: on\n')
    assert [s.tls_name for s in group.servers] == ["localhost"] * len(group.servers)
    group = load_group(tmp_path, 'servers: ["localhost:8443"]\ntls: off\n')
    assert group.tls is None
    group = load_group(tmp_path, 'servers: ["unix:/run/a.sock"]\ntls: {name: app.test}\n')
    assert [s.tls_name for s in group.servers] == ["app.test"]


def test_bad_ca_path_refused_with_its_line(tmp_path):
    assert route_problem(tmp_path, 'url: "https://127.0.0.1:8443"\ntls: {ca: missing.pem}\n') \
        == f"F:10:21: {P}.tls.ca: cannot read {tmp_path}/missing.pem: No such file or directory"
    assert one(problems_of(tmp_path, group_text(
        'servers: ["localhost:1"]\ntls:\n  ca: /nonexistent/ca.pem\n'))) == \
        f"F:9:11: {G}.tls.ca: cannot read /nonexistent/ca.pem: No such file or directory"


@pytest.mark.parametrize("tls, anchor, message", [
    # `anchor`: where in the value the problem is reported (its first occurrence)
    ("{ca: JUNK}", "JUNK", "tls.ca: JUNK holds no PEM certificate"),
    ("{cert: CERT}", "cert", "tls.cert: a client certificate needs both cert and key: "
     "key is missing"),
    ("{key: KEY}", "key", "tls.key: a client certificate needs both cert and key: "
     "cert is missing"),
    ("{cert: CERT, key: OTHER_KEY}", "OTHER_KEY", "tls.key: the key OTHER_KEY does not "
     "belong to the certificate CERT"),
    ("{cert: CERT, key: CA}", "CA", "tls.key: CA holds no PEM private key"),
    ("{name: 'a b'}", "'a b'", "tls.name: 'a b' is not a host name or an IP address"),
    ("{protocols: [TLSv1.1]}", "TLSv1.1", "tls.protocols[0]: TLSv1.1 is insecure and "
     "refused (RFC 8996 deprecates TLS 1.0 and 1.1; SSL is broken): use TLSv1.2 and TLSv1.3"),
    ("{protocols: [TLSv1.4]}", "TLSv1.4", "tls.protocols[0]: unknown protocol 'TLSv1.4'; "
     "did you mean 'TLSv1.3'?"),
    ("{protocols: []}", "[]", "tls.protocols: expected at least one protocol"),
    ("{verify: maybe}", "maybe", "tls.verify: expected on or off, got a string 'maybe'"),
    ("{sni: 1}", "1", "tls.sni: expected on or off, got an integer 1"),
    ("{cas: x}", "cas", "tls.cas: unknown key 'cas'; did you mean 'ca'?"),
    ("off", "off", "tls: an https:// url always uses TLS: give a mapping of options "
     "(such as {ca: ca.pem}) or leave tls out"),
    ("[1]", "[1]", "tls: expected on, off or a mapping such as {ca: ca.pem, name: "
     "api.example.com}; got a list"),
])
def test_route_tls_problems(tmp_path, pems, tls, anchor, message):
    names = {"JUNK": pems["junk"], "CERT": pems["cert"], "OTHER_KEY": pems["other_key"],
             "CA": pems["ca"], "KEY": pems["key"]}

    def fill(text):
        for k, v in sorted(names.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(k, v)
        return text

    value = fill(tls)
    col = 16 + value.index(fill(anchor))      # the line is "          tls: VALUE"
    assert route_problem(tmp_path, f'url: "https://127.0.0.1:8443"\ntls: {value}\n') == \
        f"F:10:{col}: {P}.{fill(message)}"


def test_ca_with_verify_off_is_a_warning(tmp_path, pems):
    p, cfg = load_proxy(tmp_path, f'url: "https://127.0.0.1:8443"\n'
                                  f'tls: {{verify: off, ca: {pems["ca"]}}}\n')
    assert cfg.upstreams[p.upstream].tls.verify is False
    assert [(w.line, w.key_path, w.message) for w in cfg.warnings] == [
        (10, f"{P}.tls.ca", "ca has no effect with verify: off")]


@pytest.mark.parametrize("body, where, message", [
    ('servers: ["https://127.0.0.1:1", "127.0.0.1:2"]', "7:38",
     "servers[1]: a group's servers are all https:// or none (upstreams.api.servers[0] "
     "is https://): give every server https://, or tls: on to the group"),
    ('servers: ["127.0.0.1:1", {address: "https://127.0.0.1:2"}]', "7:15",
     "servers[0]: a group's servers are all https:// or none (upstreams.api.servers[1] "
     "is https://): give every server https://, or tls: on to the group"),
    ('servers: ["https://127.0.0.1:1"]\ntls: off', "8:5",
     "tls: tls: off contradicts the https:// servers"),
    ('servers: ["unix:/run/a.sock"]\ntls: on', "8:5",
     "tls: the server unix:/run/a.sock is a unix socket: it has no host name to verify; "
     "give tls.name (or verify: off)"),
    ('servers: ["https://"]', "7:15", "servers[0]: expected a host after 'https://'"),
    ('servers: ["localhost:1"]\ntls: {wat: 1}', "8:11",
     "tls.wat: unknown key 'wat' (known keys: verify, ca, name, sni, cert, key, protocols)"),
])
def test_group_tls_problems(tmp_path, body, where, message):
    assert group_problem(tmp_path, body + "\n") == f"F:{where}: {G}.{message}"


def test_tls_on_a_route_with_a_group_or_http(tmp_path):
    assert route_problem(tmp_path, "upstream: api\ntls: on\n") == (
        f"F:10:11: {P}.tls: tls goes with an https:// url; for a group, give tls under "
        "upstreams.api")
    assert route_problem(tmp_path, 'url: "http://127.0.0.1:1"\ntls: on\n') == (
        f"F:10:11: {P}.tls: tls applies only to an https:// url")
