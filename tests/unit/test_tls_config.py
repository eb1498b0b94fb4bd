"""The config half of TLS (scalws/config/directives/tls.py) and the
certificate checks (scalws/config/tlscheck.py), with certificates made for
each case by tests/tlspki.py.

Most tests call compile_site_tls directly on the `tls:` value of a small YAML
document through a loader context, as the loader does for `sites[0]`; the
file is shown as F and the PKI folder as D in the expected lines. The tests
named test_loader_* go through load_config_text and need the loader wired:
site key `tls` -> Site.tls by
tls.compile_site_tls(ctx, node, path + ".tls", site.server_names), listen
option `tls` -> Listen.tls = True, top-level `tls_tickets` -> Config.tickets
by tls.compile_tickets.
"""
import os
import textwrap
import time

import pytest
import yaml

from scalws.config import tlscheck
from scalws.config.directives.tls import compile_site_tls, compile_tickets, hsts_value
from scalws.config.errors import ConfigError
from scalws.config.loader import _Context, load_config_text
from scalws.config.model import (TLS_CIPHERS, TLS_CIPHERSUITES, TLS_CURVES,
                                 TLS_PROTOCOLS, Certificate, SiteTLS, TicketKeys)
from tests.tlspki import DAY, PKI, key_pem, ocsp_response, write_pem

OCSP_URL = "http://127.0.0.1:9/ocsp"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """One CA, one intermediate, an ECDSA and an RSA leaf for example.com and
    *.example.com, shared by the module (files are never changed in place)."""
    p = PKI(tmp_path_factory.mktemp("tls"))
    p.ca = p.root()
    p.inter = p.intermediate(p.ca)
    p.ec = p.leaf(p.inter, ["example.com", "*.example.com"], name="ec",
                  ocsp_url=OCSP_URL)
    p.rsa = p.leaf(p.inter, ["example.com", "*.example.com"], key="rsa", name="rsa")
    return p


def compile_tls(pki, text, server_names=()):
    """compile_site_tls on the value of the first key of `text`; returns
    (SiteTLS or None, error lines, warning lines), the PKI folder shown as D."""
    ctx = _Context("F", pki.folder)
    doc = yaml.compose(textwrap.dedent(text), Loader=yaml.SafeLoader)
    tls = compile_site_tls(ctx, doc.value[0][1], "sites[0].tls", list(server_names))
    def lines(problems):      # in file order, as ConfigError shows them
        ordered = sorted(problems, key=lambda p: (p.line, p.column))
        return [str(p).replace(pki.folder, "D") for p in ordered]
    return tls, lines(ctx.problems), lines(ctx.warnings)


def ok_tls(pki, text, server_names=()):
    tls, errors, warnings = compile_tls(pki, text, server_names)
    assert errors == [], errors
    assert warnings == [], warnings
    assert isinstance(tls, SiteTLS)
    return tls


def errors_of(pki, text, server_names=()):
    tls, errors, _ = compile_tls(pki, text, server_names)
    assert tls is None
    assert errors
    return errors


def warnings_of(pki, text, server_names=()):
    tls, errors, warnings = compile_tls(pki, text, server_names)
    assert errors == [], errors
    assert tls is not None
    return warnings


def shorthand(name):
    """A `tls` with cert and key NAME.pem and NAME.key (lines 1-3); further
    keys can be appended as "  key: value\n" lines (line 4 on)."""
    return f"tls:\n  cert: {name}.pem\n  key: {name}.key\n"


def date(t):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


# --------------------------------------------------------------------------
# Accepted forms

def test_shorthand_fills_the_certificate(pki):
    tls = ok_tls(pki, shorthand("ec"), ["example.com", "www.example.com"])
    [cert] = tls.certificates
    assert cert == Certificate(
        cert=os.path.join(pki.folder, "ec.pem"), key=os.path.join(pki.folder, "ec.key"),
        ocsp_file=None, key_type="ECDSA P-256", names=["example.com", "*.example.com"],
        not_after=pki.ec.cert.not_valid_after_utc.timestamp(), ocsp_url=OCSP_URL,
        mark=("F", 2, 3))
    assert tls.protocols == TLS_PROTOCOLS
    assert tls.ciphers == TLS_CIPHERS
    assert tls.ciphersuites == TLS_CIPHERSUITES
    assert tls.curves == TLS_CURVES
    assert tls.ocsp_stapling is True
    assert tls.hsts is None
    assert tls.redirect is False
    assert tls.mark == ("F", 2, 3)


def test_certificates_one_per_key_type(pki):
    tls = ok_tls(pki, """\
    tls:
      certificates:
        - {cert: ec.pem, key: ec.key}
        - cert: rsa.pem
          key: rsa.key
    """, ["example.com"])
    ec, rsa = tls.certificates
    assert (ec.key_type, ec.mark) == ("ECDSA P-256", ("F", 3, 7))
    assert (rsa.key_type, rsa.mark) == ("RSA 2048", ("F", 4, 7))
    assert rsa.ocsp_url is None


def test_every_option(pki):
    tls = ok_tls(pki, """\
    tls:
      cert: ec.pem
      key: ec.key
      protocols: [TLSv1.3, TLSv1.2]
      ciphers: "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305"
      ciphersuites: [TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256]
      curves: [X25519, P-256, secp384r1, P-521, X448]
      ocsp_stapling: off
      hsts: {max_age: 2y, include_subdomains: on, preload: on}
      redirect: on
    """)
    assert tls.protocols == ["TLSv1.2", "TLSv1.3"]
    assert tls.ciphers == "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305"
    assert tls.ciphersuites == "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
    assert tls.curves == ["X25519", "prime256v1", "secp384r1", "secp521r1", "X448"]
    assert tls.ocsp_stapling is False
    assert tls.hsts == "max-age=63072000; includeSubDomains; preload"
    assert tls.redirect is True


def test_lists_may_be_strings(pki):
    tls = ok_tls(pki, """\
    tls:
      cert: ec.pem
      key: ec.key
      protocols: TLSv1.3
      ciphersuites: "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
      curves: "X25519:prime256v1"
    """)
    assert tls.protocols == ["TLSv1.3"]
    assert tls.ciphersuites == "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
    assert tls.curves == ["X25519", "prime256v1"]


@pytest.mark.parametrize("value, expected", [
    ("on", "max-age=31536000"),
    ("off", None),
    ("{max_age: 180d}", "max-age=15552000"),
    ("{max_age: 600}", "max-age=600"),
    ("{max_age: 0}", "max-age=0"),
    ("{include_subdomains: on}", "max-age=31536000; includeSubDomains"),
    ("{max_age: 1y, include_subdomains: on, preload: on}",
     "max-age=31536000; includeSubDomains; preload"),
])
def test_hsts_forms(pki, value, expected):
    tls = ok_tls(pki, shorthand("ec") + f"  hsts: {value}\n")
    assert tls.hsts == expected


def test_hsts_value():
    assert hsts_value(31536000, True, True) == "max-age=31536000; includeSubDomains; preload"
    assert hsts_value(86400) == "max-age=86400"


# --------------------------------------------------------------------------
# The shape of `tls`

def test_not_a_mapping(pki):
    assert errors_of(pki, "tls: on\n") == [
        "F:1:6: sites[0].tls: expected a mapping with cert and key (or certificates), "
        "got a boolean (on)"]


def test_unknown_key_has_a_hint(pki):
    assert errors_of(pki, shorthand("ec") + "  ciphersuite: TLS_AES_128_GCM_SHA256\n") == [
        "F:4:3: sites[0].tls.ciphersuite: unknown key 'ciphersuite'; did you mean "
        "'ciphersuites'?"]


def test_a_certificate_is_required(pki):
    assert errors_of(pki, "tls:\n  redirect: on\n") == [
        "F:2:3: sites[0].tls: a certificate is required: give cert and key, or "
        "certificates (a list of {cert, key})"]


def test_cert_without_key(pki):
    assert errors_of(pki, "tls:\n  cert: ec.pem\n") == [
        "F:2:3: sites[0].tls.key: required key is missing (a certificate needs cert "
        "and key)"]


def test_cert_and_certificates_exclude_each_other(pki):
    assert errors_of(pki, """\
    tls:
      cert: ec.pem
      key: ec.key
      certificates: [{cert: rsa.pem, key: rsa.key}]
    """) == [
        "F:4:3: sites[0].tls.certificates: cert/key and certificates exclude each "
        "other: give one certificate with cert and key, or a list of them under "
        "certificates"]


def test_certificates_items(pki):
    assert errors_of(pki, """\
    tls:
      certificates:
        - ec.pem
        - {cert: rsa.pem}
        - {cert: ec.pem, key: ec.key, ocsp: x}
    """) == [
        "F:3:7: sites[0].tls.certificates[0]: expected a mapping with cert and key "
        "(and optionally ocsp_file), got a string 'ec.pem'",
        "F:4:7: sites[0].tls.certificates[1].key: required key is missing (a "
        "certificate needs cert and key)",
        "F:5:35: sites[0].tls.certificates[2].ocsp: unknown key 'ocsp'; did you mean "
        "'ocsp_file'?",
    ]


def test_two_certificates_of_one_key_type(pki):
    other = pki.leaf(pki.inter, ["example.com"], key="p384", name="ec384")
    assert errors_of(pki, f"""\
    tls:
      certificates:
        - {{cert: ec.pem, key: ec.key}}
        - {{cert: {os.path.basename(other.cert_path)}, key: ec384.key}}
    """) == [
        "F:4:14: sites[0].tls.certificates[1].cert: a second ECDSA certificate (the "
        "first is at line 3): OpenSSL keeps one certificate per key type; give at most "
        "one ECDSA and one RSA certificate"]


# --------------------------------------------------------------------------
# protocols, ciphers, ciphersuites, curves

@pytest.mark.parametrize("written, shown", [
    ("TLSv1", "TLSv1.0"), ("TLSv1.0", "TLSv1.0"), ("TLSv1.1", "TLSv1.1"),
    ("SSLv3", "SSLv3"), ("tlsv1_1", "TLSv1.1"),
])
def test_old_protocols_are_refused_as_insecure(pki, written, shown):
    assert errors_of(pki, shorthand("ec") + f"  protocols: [TLSv1.2, {written}]\n") == [
        f"F:4:24: sites[0].tls.protocols[1]: {shown} is insecure and refused (RFC 8996 "
        "deprecates TLS 1.0 and 1.1; SSL is broken): use TLSv1.2 and TLSv1.3"]


def test_protocol_problems(pki):
    assert errors_of(pki, shorthand("ec") + "  protocols: [TLSv1.3, tls1.3, TLSv1.3, "
                     "QUIC]\n") == [
        "F:4:24: sites[0].tls.protocols[1]: unknown protocol 'tls1.3'; did you mean "
        "'TLSv1.3'?",
        "F:4:32: sites[0].tls.protocols[2]: TLSv1.3 is already listed (line 4)",
        "F:4:41: sites[0].tls.protocols[3]: unknown protocol 'QUIC' (known: TLSv1.2, "
        "TLSv1.3)",
    ]
    assert errors_of(pki, shorthand("ec") + "  protocols: []\n") == [
        "F:4:14: sites[0].tls.protocols: expected at least one protocol"]


def test_cipher_list_matching_nothing(pki):
    assert errors_of(pki, shorthand("ec") + '  ciphers: "RC4-NOPE"\n') == [
        "F:4:12: sites[0].tls.ciphers: no cipher matches 'RC4-NOPE' (OpenSSL cipher "
        "names such as ECDHE-ECDSA-AES128-GCM-SHA256, or expressions such as "
        "ECDHE+AESGCM)"]


def test_cipher_list_with_one_misspelt_name(pki):
    # OpenSSL would skip the misspelt name silently.
    assert errors_of(pki, shorthand("ec") + "  ciphers: [ECDHE-ECDSA-AES128-GCM-SHA256, "
                     "ECDHE-ECDSA-AES256-GCM-SHA348]\n") == [
        "F:4:44: sites[0].tls.ciphers[1]: no cipher matches "
        "'ECDHE-ECDSA-AES256-GCM-SHA348'; did you mean 'ECDHE-ECDSA-AES256-GCM-SHA384'? "
        "(OpenSSL cipher names such as ECDHE-ECDSA-AES128-GCM-SHA256, or expressions "
        "such as ECDHE+AESGCM)"]


def test_cipher_list_with_a_tls13_suite(pki):
    assert errors_of(pki, shorthand("ec") + '  ciphers: "TLS_AES_128_GCM_SHA256"\n') == [
        "F:4:12: sites[0].tls.ciphers: TLS_AES_128_GCM_SHA256 is a TLS 1.3 suite: list "
        "it under ciphersuites (ciphers is for TLS 1.2)"]


def test_cipher_expressions_are_accepted(pki):
    tls = ok_tls(pki, shorthand("ec") + '  ciphers: "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"\n')
    assert tls.ciphers == "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"


def test_weak_ciphers_are_warned_about(pki):
    warnings = warnings_of(pki, shorthand("ec") + '  ciphers: "ECDHE+AESGCM:aNULL"\n')
    assert len(warnings) == 1
    assert warnings[0].startswith("F:4:12: sites[0].tls.ciphers: the cipher list "
                                  "enables broken or anonymous ciphers: ADH-")


def test_ciphers_for_no_certificate_of_the_site(pki):
    rsa_only = "ECDHE-RSA-AES128-GCM-SHA256"
    assert warnings_of(pki, shorthand("ec") + f"  ciphers: {rsa_only}\n") == [
        "F:4:12: sites[0].tls.ciphers: no cipher in the list can be used with the "
        "ECDSA certificate (TLS 1.2 needs ECDHE-ECDSA-... ciphers for it): TLS 1.2 "
        "clients cannot use it"]
    assert errors_of(pki, shorthand("ec") + f"  ciphers: {rsa_only}\n"
                     "  protocols: [TLSv1.2]\n") == [
        "F:4:12: sites[0].tls.ciphers: no cipher in the list can be used with the "
        "ECDSA certificate (TLS 1.2 needs ECDHE-ECDSA-... ciphers for it): no TLS "
        "handshake could succeed"]


def test_settings_for_a_protocol_left_out(pki):
    assert warnings_of(pki, shorthand("ec") + "  protocols: [TLSv1.3]\n"
                       "  ciphers: ECDHE-ECDSA-AES128-GCM-SHA256\n") == [
        "F:5:3: sites[0].tls.ciphers: ciphers is for TLS 1.2, which protocols leaves "
        "out: it has no effect"]
    assert warnings_of(pki, shorthand("ec") + "  protocols: [TLSv1.2]\n"
                       "  ciphersuites: TLS_AES_128_GCM_SHA256\n") == [
        "F:5:3: sites[0].tls.ciphersuites: ciphersuites is for TLS 1.3, which "
        "protocols leaves out: it has no effect"]


def test_ciphersuite_problems(pki):
    assert errors_of(pki, shorthand("ec") + "  ciphersuites: [TLS_AES_128_GCM_SHA256, "
                     "TLS_AES_128_GCM_SHA384, ECDHE-ECDSA-AES128-GCM-SHA256, "
                     "TLS_AES_128_GCM_SHA256]\n") == [
        "F:4:42: sites[0].tls.ciphersuites[1]: unknown TLS 1.3 suite "
        "'TLS_AES_128_GCM_SHA384'; did you mean 'TLS_AES_256_GCM_SHA384'?",
        "F:4:66: sites[0].tls.ciphersuites[2]: ECDHE-ECDSA-AES128-GCM-SHA256 is a TLS "
        "1.2 cipher: list it under ciphers (ciphersuites is for TLS 1.3)",
        "F:4:97: sites[0].tls.ciphersuites[3]: TLS_AES_128_GCM_SHA256 is already listed",
    ]


def test_curve_problems(pki):
    assert errors_of(pki, shorthand("ec") + "  curves: [X25519, P-256, prime256v1, "
                     "P-255, brainpoolP256r1]\n") == [
        "F:4:27: sites[0].tls.curves[2]: prime256v1 is already listed (as P-256)",
        "F:4:39: sites[0].tls.curves[3]: unknown curve 'P-255'; did you mean 'P-256'?",
        "F:4:46: sites[0].tls.curves[4]: unknown curve 'brainpoolP256r1' (known: "
        "X25519, X448, P-256, P-384, P-521)",
    ]


# --------------------------------------------------------------------------
# hsts, ocsp_stapling, redirect

def test_preload_requires_include_subdomains(pki):
    assert errors_of(pki, shorthand("ec") + "  hsts: {max_age: 1y, preload: on}\n") == [
        "F:4:23: sites[0].tls.hsts.preload: preload requires include_subdomains: on "
        "(hstspreload.org refuses the domain otherwise)"]


def test_preload_requires_a_year(pki):
    assert errors_of(pki, shorthand("ec") + "  hsts: {max_age: 180d, include_subdomains: "
                     "on, preload: on}\n") == [
        "F:4:49: sites[0].tls.hsts.preload: preload requires a max_age of at least 1y "
        "(31536000 seconds), got 15552000 (hstspreload.org refuses the domain "
        "otherwise)"]


def test_hsts_problems(pki):
    assert errors_of(pki, shorthand("ec") + "  hsts: {max_age: soon, preload: yes please, "
                     "include: on}\n") == [
        "F:4:19: sites[0].tls.hsts.max_age: expected a duration such as 1y, 180d or "
        "31536000 (seconds), got a string 'soon'",
        "F:4:34: sites[0].tls.hsts.preload: expected on or off, got a string 'yes please'",
        "F:4:46: sites[0].tls.hsts.include: unknown key 'include' (known keys: max_age, "
        "include_subdomains, preload)",
    ]
    assert errors_of(pki, shorthand("ec") + "  hsts: 1y\n") == [
        "F:4:9: sites[0].tls.hsts: expected on, off or a mapping such as {max_age: 1y, "
        "include_subdomains: on}; got a string '1y'"]


def test_booleans(pki):
    assert errors_of(pki, shorthand("ec") + "  redirect: https\n  ocsp_stapling: 1\n") == [
        "F:4:13: sites[0].tls.redirect: expected on or off, got a string 'https'",
        "F:5:18: sites[0].tls.ocsp_stapling: expected on or off, got an integer 1",
    ]


# --------------------------------------------------------------------------
# The certificate files (tlscheck through compile_site_tls)

def test_expired_certificate(pki):
    leaf = pki.leaf(pki.inter, ["example.com"], name="expired",
                    not_before=-30 * DAY, not_after=-DAY)
    assert errors_of(pki, shorthand("expired")) == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=example.com) in D/expired.pem "
        f"expired on {date(leaf.cert.not_valid_after_utc.timestamp())}"]


def test_not_yet_valid_certificate(pki):
    leaf = pki.leaf(pki.inter, ["example.com"], name="future", not_before=DAY)
    assert errors_of(pki, shorthand("future")) == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=example.com) in D/future.pem "
        f"is not valid before {date(leaf.cert.not_valid_before_utc.timestamp())}"]


def test_expiring_in_five_days(pki):
    leaf = pki.leaf(pki.inter, ["example.com"], name="soon", not_after=5 * DAY)
    tls, errors, warnings = compile_tls(pki, shorthand("soon"))
    assert errors == []
    assert warnings == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=example.com) in D/soon.pem "
        f"expires in 5 days, on {date(leaf.cert.not_valid_after_utc.timestamp())}: "
        "renew it"]
    assert tls.certificates[0].not_after == leaf.cert.not_valid_after_utc.timestamp()


def test_expired_intermediate(pki):
    old = pki.intermediate(pki.ca, name="Old Intermediate", not_before=-40 * DAY,
                           not_after=-2 * DAY)
    pki.leaf(old, ["example.com"], name="under-old", not_before=-30 * DAY,
             not_after=30 * DAY)
    assert errors_of(pki, shorthand("under-old")) == [
        "F:2:9: sites[0].tls.cert: intermediate certificate 2 (CN=Old Intermediate) in "
        "D/under-old.pem expired on "
        f"{date(old.cert.not_valid_after_utc.timestamp())}"]


def test_key_of_another_certificate(pki):
    assert errors_of(pki, "tls:\n  cert: ec.pem\n  key: rsa.key\n") == [
        "F:3:8: sites[0].tls.key: the private key in D/rsa.key does not match the "
        "certificate (CN=example.com) in D/ec.pem: they are not a pair"]


def test_chain_out_of_order(pki):
    # leaf, root, intermediate: the intermediate must come right after the leaf.
    pki.leaf(pki.inter, ["example.com"], name="disorder", chain=[pki.ca, pki.inter])
    tls, errors, warnings = compile_tls(pki, shorthand("disorder"))
    assert errors == [
        "F:2:9: sites[0].tls.cert: the chain in D/disorder.pem is out of order: "
        "certificate 1 (CN=example.com) is issued by certificate 3 (CN=ScalWS Test "
        "Intermediate CA), but certificate 2 (CN=ScalWS Test Root CA) follows it; "
        "write the leaf first, then each certificate's issuer right after it"]
    assert warnings == [
        "F:2:9: sites[0].tls.cert: certificate 2 (CN=ScalWS Test Root CA) in "
        "D/disorder.pem is a self-signed root: clients use their own copy, so sending "
        "it only adds bytes to every handshake; remove it from the file"]


def test_leaf_not_first(pki):
    # The intermediate, then the leaf: the key belongs to certificate 2.
    write_pem(pki.path("backwards.pem"), [pki.inter, pki.ec])
    errors = errors_of(pki, "tls:\n  cert: backwards.pem\n  key: ec.key\n")
    assert errors == [
        "F:2:9: sites[0].tls.cert: in D/backwards.pem, certificate 2 (CN=example.com) "
        "did not issue certificate 1 (CN=ScalWS Test Intermediate CA), whose issuer is "
        "'CN=ScalWS Test Root CA': put that issuer's certificate after it, or remove "
        "certificate 2",
        "F:3:8: sites[0].tls.key: the private key in D/ec.key belongs to certificate 2 "
        "(CN=example.com) of D/backwards.pem, not to the first: the leaf certificate "
        "must come first",
    ]


def test_wrong_intermediate(pki):
    other_root = pki.root(name="Other Root")
    other = pki.intermediate(other_root, name="Other Intermediate")
    pki.leaf(pki.inter, ["example.com"], name="wrong-chain", chain=[other])
    assert errors_of(pki, shorthand("wrong-chain")) == [
        "F:2:9: sites[0].tls.cert: in D/wrong-chain.pem, certificate 2 (CN=Other "
        "Intermediate) did not issue certificate 1 (CN=example.com), whose issuer is "
        "'CN=ScalWS Test Intermediate CA': put that issuer's certificate after it, or "
        "remove certificate 2"]


def test_same_name_other_key_in_chain(pki):
    # An intermediate with the right name but another key (a re-keyed CA).
    impostor = pki.intermediate(pki.ca, name="ScalWS Test Intermediate CA")
    pki.leaf(pki.inter, ["example.com"], name="rekeyed", chain=[impostor])
    assert errors_of(pki, shorthand("rekeyed")) == [
        "F:2:9: sites[0].tls.cert: in D/rekeyed.pem, certificate 1 (CN=example.com) "
        "names certificate 2 (CN=ScalWS Test Intermediate CA) as its issuer, but its "
        "signature does not verify with that certificate's key (another issuer with "
        "the same name?)"]


def test_root_in_the_file_is_useless(pki):
    pki.leaf(pki.inter, ["example.com"], name="with-root", include_root=True)
    assert warnings_of(pki, shorthand("with-root")) == [
        "F:2:9: sites[0].tls.cert: certificate 3 (CN=ScalWS Test Root CA) in "
        "D/with-root.pem is a self-signed root: clients use their own copy, so sending "
        "it only adds bytes to every handshake; remove it from the file"]


def test_leaf_alone_is_an_incomplete_chain(pki):
    pki.leaf(pki.inter, ["example.com"], name="alone", chain=[])
    assert warnings_of(pki, shorthand("alone")) == [
        "F:2:9: sites[0].tls.cert: D/alone.pem holds only the leaf certificate: append "
        "the intermediate certificate(s) of its issuer 'CN=ScalWS Test Intermediate "
        "CA', or clients that do not have them will fail to verify it (unless that "
        "issuer is a root they trust)"]


def test_self_signed(pki):
    pki.self_signed(["example.com"], name="selfie")
    assert warnings_of(pki, shorthand("selfie")) == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=example.com) in D/selfie.pem is "
        "self-signed: clients will not trust it unless told to"]


def test_world_readable_key(pki):
    pki.leaf(pki.inter, ["example.com"], name="open-key", key_mode=0o644)
    assert warnings_of(pki, shorthand("open-key")) == [
        "F:3:8: sites[0].tls.key: the private key D/open-key.key is readable by "
        "everyone (mode 0644): chmod 600 D/open-key.key"]


def test_group_readable_key_is_fine(pki):
    pki.leaf(pki.inter, ["example.com"], name="group-key", key_mode=0o640)
    ok_tls(pki, shorthand("group-key"))


def test_rsa_1024_is_refused(pki):
    pki.leaf(pki.inter, ["example.com"], key="rsa1024", name="weak")
    assert errors_of(pki, shorthand("weak")) == [
        "F:2:9: sites[0].tls.cert: the certificate's key in D/weak.pem is RSA 1024: at "
        "least 2048 bits are required (clients refuse smaller RSA keys)"]


def test_encrypted_key_is_refused(pki):
    write_pem(pki.path("locked.key"), [key_pem(pki.ec.key, b"secret")], mode=0o600)
    assert errors_of(pki, "tls:\n  cert: ec.pem\n  key: locked.key\n") == [
        "F:3:8: sites[0].tls.key: the private key in D/locked.key is encrypted with a "
        "passphrase, which scalws does not support (it would have to ask for it at "
        "every reload): write it without one, readable by root only, with openssl "
        "pkey -in D/locked.key -out NEW_FILE"]


def test_missing_files(pki):
    assert errors_of(pki, "tls:\n  cert: nope.pem\n  key: nope.key\n") == [
        "F:2:9: sites[0].tls.cert: cannot read D/nope.pem: No such file or directory",
        "F:3:8: sites[0].tls.key: cannot read D/nope.key: No such file or directory",
    ]


def test_swapped_cert_and_key(pki):
    assert errors_of(pki, "tls:\n  cert: ec.key\n  key: ec.pem\n") == [
        "F:2:9: sites[0].tls.cert: D/ec.key holds a private key, not a certificate: "
        "are cert and key swapped?",
        "F:3:8: sites[0].tls.key: D/ec.pem holds a certificate, not a private key: are "
        "cert and key swapped?",
    ]


def test_der_certificate(pki):
    from cryptography.hazmat.primitives.serialization import Encoding
    with open(pki.path("ec.der"), "wb") as f:
        f.write(pki.ec.cert.public_bytes(Encoding.DER))
    assert errors_of(pki, "tls:\n  cert: ec.der\n  key: ec.key\n") == [
        "F:2:9: sites[0].tls.cert: D/ec.der is DER (binary), not PEM: convert it with "
        "openssl x509 -inform der -in D/ec.der -out D/ec.der.pem"]


def test_damaged_and_truncated_pem(pki):
    text = pki.ec.pem.decode()
    lines = text.splitlines()
    lines[3] = lines[3][:10] + "!" + lines[3][11:]
    with open(pki.path("damaged.pem"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(pki.path("truncated.pem"), "w") as f:
        f.write(text + pki.inter.pem.decode()[:200])
    assert errors_of(pki, "tls:\n  cert: damaged.pem\n  key: ec.key\n") == [
        "F:2:9: sites[0].tls.cert: certificate 1 in D/damaged.pem is damaged: its text "
        "is not valid base64"]
    assert errors_of(pki, "tls:\n  cert: truncated.pem\n  key: ec.key\n") == [
        "F:2:9: sites[0].tls.cert: D/truncated.pem: certificate 2 has no -----END "
        "CERTIFICATE----- line (a truncated file?)"]


def test_not_for_servers(pki):
    pki.leaf(pki.inter, ["example.com"], name="client-only", server_auth=False)
    assert errors_of(pki, shorthand("client-only")) == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=example.com) in "
        "D/client-only.pem is not for TLS servers: its extended key usage lacks "
        "serverAuth, so clients refuse it"]


def test_no_subject_alt_name(pki):
    pki.leaf(pki.inter, ["legacy.example.com"], name="cn-only", san=False)
    tls, errors, warnings = compile_tls(pki, shorthand("cn-only"), ["legacy.example.com"])
    assert errors == []
    assert warnings == [
        "F:2:9: sites[0].tls.cert: the certificate (CN=legacy.example.com) in "
        "D/cn-only.pem has no subjectAltName: browsers ignore its Common Name "
        "(legacy.example.com) and refuse it for every name; reissue it with its names "
        "in subjectAltName"]
    assert tls.certificates[0].names == ["legacy.example.com"]


def test_ed25519_alone_is_warned_about(pki):
    pki.leaf(pki.inter, ["example.com"], key="ed25519", name="edwards")
    tls, errors, warnings = compile_tls(pki, shorthand("edwards"))
    assert errors == []
    assert tls.certificates[0].key_type == "Ed25519"
    assert warnings == [
        "F:2:9: sites[0].tls.cert: only Ed25519 certificates: browsers do not accept "
        "them; add an ECDSA P-256 or RSA 2048 certificate"]


# --------------------------------------------------------------------------
# Server names

def test_server_names_not_covered(pki):
    assert warnings_of(pki, shorthand("ec"), ["example.com", "a.example.com",
                                              "a.b.example.com", "example.org"]) == [
        "F:2:9: sites[0].tls.cert: no certificate of this site covers the server name "
        "'a.b.example.com' (the certificate covers example.com, *.example.com): "
        "clients asking for it get a name mismatch",
        "F:2:9: sites[0].tls.cert: no certificate of this site covers the server name "
        "'example.org' (the certificate covers example.com, *.example.com): clients "
        "asking for it get a name mismatch",
    ]


def test_server_name_covered_by_one_certificate_only(pki):
    pki.leaf(pki.inter, ["example.com"], key="rsa", name="rsa-narrow")
    assert warnings_of(pki, """\
    tls:
      certificates:
        - {cert: ec.pem, key: ec.key}
        - {cert: rsa-narrow.pem, key: rsa-narrow.key}
    """, ["example.com", "www.example.com"]) == [
        "F:4:14: sites[0].tls.certificates[1].cert: this RSA 2048 certificate does not "
        "cover the server name 'www.example.com' (it covers example.com), which another "
        "certificate of the site does: clients that choose this one get a name mismatch"]


@pytest.mark.parametrize("server_name, names, ips, covered", [
    ("example.com", ["example.com"], [], True),
    ("EXAMPLE.com.", ["example.com"], [], True),
    ("a.example.com", ["*.example.com"], [], True),
    ("a.b.example.com", ["*.example.com"], [], False),
    ("example.com", ["*.example.com"], [], False),
    ("*.example.com", ["*.example.com"], [], True),
    ("*.example.com", ["a.example.com", "b.example.com"], [], False),
    ("*.example.com", ["*.com"], [], False),
    ("a.example.com", ["a*.example.com"], [], False),
    ("127.0.0.1", ["localhost"], ["127.0.0.1"], True),
    ("[::1]", [], ["::1"], True),
    ("127.0.0.2", ["127.0.0.2"], ["127.0.0.1"], False),
])
def test_name_covered(server_name, names, ips, covered):
    assert tlscheck.name_covered(server_name, names, ips) is covered


# --------------------------------------------------------------------------
# OCSP: ocsp_file, stapling

def test_ocsp_file_good(pki):
    with open(pki.path("ec.ocsp.der"), "wb") as f:
        f.write(ocsp_response(pki.ec, pki.inter, "good"))
    tls = ok_tls(pki, shorthand("ec") + "  ocsp_file: ec.ocsp.der\n")
    assert tls.certificates[0].ocsp_file == pki.path("ec.ocsp.der")


def test_ocsp_file_in_certificates(pki):
    with open(pki.path("ec.ocsp2.der"), "wb") as f:
        f.write(ocsp_response(pki.ec, pki.inter, "good"))
    tls = ok_tls(pki, """\
    tls:
      certificates:
        - {cert: ec.pem, key: ec.key, ocsp_file: ec.ocsp2.der}
        - {cert: rsa.pem, key: rsa.key}
    """)
    assert tls.certificates[0].ocsp_file == pki.path("ec.ocsp2.der")
    assert tls.certificates[1].ocsp_file is None
    assert errors_of(pki, """\
    tls:
      certificates: [{cert: ec.pem, key: ec.key}]
      ocsp_file: ec.ocsp2.der
    """) == [
        "F:3:3: sites[0].tls.ocsp_file: with certificates, give ocsp_file in the item "
        "of the certificate it is for"]


def test_ocsp_file_revoked(pki):
    der = ocsp_response(pki.ec, pki.inter, "revoked", revoked_at=-DAY)
    with open(pki.path("revoked.der"), "wb") as f:
        f.write(der)
    [line] = errors_of(pki, shorthand("ec") + "  ocsp_file: revoked.der\n")
    assert line.startswith("F:4:14: sites[0].tls.ocsp_file: the OCSP response in "
                           "D/revoked.der says the certificate (CN=example.com) was "
                           "revoked on ")
    assert line.endswith(": replace the certificate")


def test_ocsp_file_stale(pki):
    der = ocsp_response(pki.ec, pki.inter, "good", this_update=-3 * DAY,
                        next_update=-DAY)
    with open(pki.path("stale.der"), "wb") as f:
        f.write(der)
    [line] = warnings_of(pki, shorthand("ec") + "  ocsp_file: stale.der\n")
    assert line.startswith("F:4:14: sites[0].tls.ocsp_file: D/stale.der: the OCSP "
                           "response is stale: its nextUpdate ")
    assert line.endswith("has passed: refresh the file (clients ignore a stale response)")


def test_ocsp_file_for_another_certificate(pki):
    with open(pki.path("rsa.ocsp.der"), "wb") as f:
        f.write(ocsp_response(pki.rsa, pki.inter, "good"))
    [line] = errors_of(pki, shorthand("ec") + "  ocsp_file: rsa.ocsp.der\n")
    assert line.startswith("F:4:14: sites[0].tls.ocsp_file: D/rsa.ocsp.der: the OCSP "
                           "response is for another certificate (serial ")


def test_ocsp_file_problems(pki):
    with open(pki.path("garbage.der"), "wb") as f:
        f.write(b"\x30\x03\x0a\x01")
    assert errors_of(pki, shorthand("ec") + "  ocsp_file: missing.der\n") == [
        "F:4:14: sites[0].tls.ocsp_file: cannot read D/missing.der: No such file or "
        "directory"]
    [line] = errors_of(pki, shorthand("ec") + "  ocsp_file: garbage.der\n")
    assert line.startswith("F:4:14: sites[0].tls.ocsp_file: D/garbage.der: not an OCSP "
                           "response (DER): ")


def test_ocsp_file_with_stapling_off(pki):
    with open(pki.path("unused.der"), "wb") as f:
        f.write(ocsp_response(pki.ec, pki.inter, "good"))
    assert warnings_of(pki, shorthand("ec") + "  ocsp_file: unused.der\n"
                       "  ocsp_stapling: off\n") == [
        "F:4:14: sites[0].tls.ocsp_file: ocsp_file is not used: ocsp_stapling is off"]


def test_must_staple_needs_stapling(pki):
    pki.leaf(pki.inter, ["example.com"], name="must", ocsp_url=OCSP_URL, must_staple=True)
    ok_tls(pki, shorthand("must"))
    assert errors_of(pki, shorthand("must") + "  ocsp_stapling: off\n") == [
        "F:4:18: sites[0].tls.ocsp_stapling: the certificate D/must.pem requires OCSP "
        "stapling (OCSP Must-Staple): clients refuse it without a stapled response"]


def test_stapling_asked_for_without_a_responder(pki):
    assert warnings_of(pki, "tls:\n  cert: rsa.pem\n  key: rsa.key\n  ocsp_stapling: on\n"
                       ) == [
        "F:4:18: sites[0].tls.ocsp_stapling: the certificate D/rsa.pem names no OCSP "
        "responder and no ocsp_file is given: nothing will be stapled for it"]
    # By default (no ocsp_stapling key) a certificate without a responder is fine.
    ok_tls(pki, shorthand("rsa"))


# --------------------------------------------------------------------------
# check_certificate on its own

def test_check_certificate_result(pki):
    result = tlscheck.check_certificate(pki.ec.cert_path, pki.ec.key_path,
                                        names=["www.example.com", "example.net"])
    assert result.errors == []
    assert result.warnings == [
        f"the certificate (CN=example.com) in {pki.ec.cert_path} does not cover the "
        "server name 'example.net' (it covers example.com, *.example.com)"]
    assert result.warnings[0].field == "cert"
    assert result.key_type == "ECDSA P-256"
    assert result.names == ["example.com", "*.example.com"]
    assert result.not_after == pki.ec.cert.not_valid_after_utc.timestamp()
    assert result.ocsp_url == OCSP_URL
    assert result.issuer_pem == pki.inter.pem
    assert result.must_staple is False


def test_check_certificate_key_types(pki):
    p384 = pki.leaf(pki.inter, ["example.com"], key="p384", name="kt384")
    assert tlscheck.check_certificate(p384.cert_path, p384.key_path).key_type == "ECDSA P-384"
    result = tlscheck.check_certificate(pki.rsa.cert_path, pki.rsa.key_path)
    assert (result.key_type, result.ocsp_url, result.errors) == ("RSA 2048", None, [])


def test_check_certificate_now(pki):
    # The same certificate, checked as if 89 days had passed: 1 day left.
    result = tlscheck.check_certificate(pki.ec.cert_path, pki.ec.key_path,
                                        now=pki.now + 89 * DAY)
    assert result.errors == []
    assert [w.split(" expires in ")[1].split(",")[0] for w in result.warnings] == ["1 day"]
    result = tlscheck.check_certificate(pki.ec.cert_path, pki.ec.key_path,
                                        now=pki.now + 91 * DAY)
    assert len(result.errors) == 1 and " expired on " in result.errors[0]


def test_check_certificate_is_fast(pki):
    start = time.perf_counter()
    for _ in range(10):
        tlscheck.check_certificate(pki.rsa.cert_path, pki.rsa.key_path, ["example.com"])
    assert (time.perf_counter() - start) / 10 < 0.05


# --------------------------------------------------------------------------
# tls_tickets

def compile_tickets_text(text):
    ctx = _Context("F", "/")
    doc = yaml.compose(textwrap.dedent(text), Loader=yaml.SafeLoader)
    tickets = compile_tickets(ctx, doc.value[0][1], "tls_tickets")
    return tickets, [str(p) for p in ctx.problems]


@pytest.mark.parametrize("text, expected", [
    ("tls_tickets: on", TicketKeys(enabled=True, rotation=3600.0)),
    ("tls_tickets: off", TicketKeys(enabled=False)),
    ("tls_tickets: {rotation: 30m}", TicketKeys(enabled=True, rotation=1800.0)),
    ("tls_tickets: {enabled: off}", TicketKeys(enabled=False)),
    ("tls_tickets: {rotation: 1m}", TicketKeys(rotation=60.0)),
    ("tls_tickets: {rotation: 7d}", TicketKeys(rotation=604800.0)),
])
def test_tickets(text, expected):
    assert compile_tickets_text(text) == (expected, [])


@pytest.mark.parametrize("text, problem", [
    ("tls_tickets: {rotation: 30s}",
     "F:1:25: tls_tickets.rotation: must be between 1m and 7d, got 30s"),
    ("tls_tickets: {rotation: 8d}",
     "F:1:25: tls_tickets.rotation: must be between 1m and 7d, got 8d"),
    ("tls_tickets: {rotate: 1h}",
     "F:1:15: tls_tickets.rotate: unknown key 'rotate'; did you mean 'rotation'?"),
    ("tls_tickets: sometimes",
     "F:1:14: tls_tickets: expected on, off or a mapping such as {enabled: on, "
     "rotation: 1h}; got a string 'sometimes'"),
])
def test_ticket_problems(text, problem):
    assert compile_tickets_text(text)[1] == [problem]


# --------------------------------------------------------------------------
# Through the loader (needs the loader wired: site key `tls`, listen option
# `tls`, top-level `tls_tickets`).

def load(pki, text):
    return load_config_text(textwrap.dedent(text), source="F", base_dir=pki.folder)


def loader_problems(pki, text):
    with pytest.raises(ConfigError) as info:
        load(pki, text)
    return [str(p).replace(pki.folder, "D") for p in info.value.problems]


def test_loader_site_tls(pki):
    cfg = load(pki, """\
    sites:
      - listen: [":8080", ":8443 tls"]
        server_names: [example.com, www.example.com]
        tls:
          certificates:
            - {cert: ec.pem, key: ec.key}
            - {cert: rsa.pem, key: rsa.key}
          hsts: on
          redirect: on
        routes:
          - {path: /, respond: 204}
    """)
    site = cfg.sites[0]
    assert [listen.tls for listen in site.listen] == [False, True]
    assert [c.key_type for c in site.tls.certificates] == ["ECDSA P-256", "RSA 2048"]
    assert [c.mark for c in site.tls.certificates] == [("F", 6, 11), ("F", 7, 11)]
    assert site.tls.hsts == "max-age=31536000"
    assert site.tls.redirect is True
    assert cfg.warnings == []
    assert cfg.tickets == TicketKeys()


def test_loader_certificate_error_position(pki):
    pki.leaf(pki.inter, ["example.com"], name="loader-expired", not_before=-9 * DAY,
             not_after=-DAY)
    [line] = loader_problems(pki, """\
    sites:
      - listen: ":8443 tls"
        tls:
          cert: loader-expired.pem
          key: loader-expired.key
        routes:
          - {path: /, respond: 204}
    """)
    assert line.startswith("F:4:13: sites[0].tls.cert: the certificate (CN=example.com) "
                           "in D/loader-expired.pem expired on ")


def test_loader_warnings(pki):
    pki.leaf(pki.inter, ["example.com"], name="loader-soon", not_after=5 * DAY,
             key_mode=0o644)
    cfg = load(pki, """\
    sites:
      - listen: ":8443 tls"
        server_names: [example.com, example.org]
        tls:
          cert: loader-soon.pem
          key: loader-soon.key
        routes:
          - {path: /, respond: 204}
    """)
    lines = [str(p).replace(pki.folder, "D") for p in cfg.warnings]
    assert len(lines) == 3, lines
    assert lines[0].startswith("F:5:13: sites[0].tls.cert: the certificate "
                               "(CN=example.com) in D/loader-soon.pem expires in 5 days")
    assert lines[1] == ("F:5:13: sites[0].tls.cert: no certificate of this site covers "
                        "the server name 'example.org' (the certificate covers "
                        "example.com): clients asking for it get a name mismatch")
    assert lines[2] == ("F:6:12: sites[0].tls.key: the private key D/loader-soon.key is "
                        "readable by everyone (mode 0644): chmod 600 D/loader-soon.key")


def test_loader_tls_problems(pki):
    assert loader_problems(pki, """\
    sites:
      - listen: ":8443 tls"
        tls:
          cert: ec.pem
          key: ec.key
          protocols: [TLSv1.1, TLSv1.2]
          ciphers: NOPE
          hsts: {preload: on}
        routes:
          - {path: /, respond: 204}
    """) == [
        "F:6:19: sites[0].tls.protocols[0]: TLSv1.1 is insecure and refused (RFC 8996 "
        "deprecates TLS 1.0 and 1.1; SSL is broken): use TLSv1.2 and TLSv1.3",
        "F:7:16: sites[0].tls.ciphers: no cipher matches 'NOPE' (OpenSSL cipher names "
        "such as ECDHE-ECDSA-AES128-GCM-SHA256, or expressions such as ECDHE+AESGCM)",
        "F:8:14: sites[0].tls.hsts.preload: preload requires include_subdomains: on "
        "(hstspreload.org refuses the domain otherwise)",
    ]


def test_loader_tickets(pki):
    cfg = load(pki, """\
    tls_tickets: {rotation: 2h}
    sites:
      - listen: ":8443 tls"
        tls: {cert: ec.pem, key: ec.key}
        routes:
          - {path: /, respond: 204}
    """)
    assert cfg.tickets == TicketKeys(enabled=True, rotation=7200.0)
    assert loader_problems(pki, """\
    tls_tickets: {rotation: 10s}
    sites:
      - listen: ":8443 tls"
        tls: {cert: ec.pem, key: ec.key}
        routes:
          - {path: /, respond: 204}
    """) == ["F:1:25: tls_tickets.rotation: must be between 1m and 7d, got 10s"]
