"""The config half of TLS: a site's `tls` key and the top-level `tls_tickets`.

    sites:
      - listen: [":80", ":443 tls"]
        server_names: [example.com, "*.example.com"]
        tls:
          cert: example.pem            # the leaf, then its chain
          key: example.key
          # or one certificate per key type:
          # certificates:
          #   - {cert: ec.pem, key: ec.key, ocsp_file: ec.ocsp.der}
          #   - {cert: rsa.pem, key: rsa.key}
          protocols: [TLSv1.2, TLSv1.3]
          ciphers: "ECDHE-ECDSA-AES128-GCM-SHA256:..."        # TLS 1.2 (OpenSSL syntax)
          ciphersuites: "TLS_AES_128_GCM_SHA256:..."          # TLS 1.3
          curves: [X25519, P-256, P-384]
          ocsp_stapling: on
          hsts: {max_age: 1y, include_subdomains: on, preload: off}   # or on / off
          redirect: on                 # the site's plain listeners answer 301 to https
    tls_tickets: {enabled: on, rotation: 1h}                    # or on / off

compile_site_tls() validates a site's `tls:` value and returns a
model.SiteTLS, or None after reporting every problem through the loader's
context (`ctx`, see loader._Context), in the shape of proxy.compile. Each
certificate is checked by scalws.config.tlscheck (files, key pair, chain,
dates, names, OCSP file); its errors refuse the file and its warnings go to
Config.warnings, both at the line that named the file. compile_tickets()
does the same for `tls_tickets` and returns a model.TicketKeys.

Paths are relative to the configuration file's folder. Cipher lists are
checked by OpenSSL itself (pyOpenSSL), TLS 1.3 suites and curves against the
names OpenSSL knows. Defaults are model.TLS_* (Mozilla's "intermediate").
pyOpenSSL and cryptography are imported on the first `tls:` met, so that a
configuration without TLS loads as fast as before.
"""
from __future__ import annotations

import difflib
import re
import time

from ..model import Certificate, SiteTLS, TicketKeys
from ..units import parse_duration

KEYS = ("cert", "key", "ocsp_file", "certificates", "protocols", "ciphers",
        "ciphersuites", "curves", "ocsp_stapling", "hsts", "redirect")
CERT_KEYS = ("cert", "key", "ocsp_file")
HSTS_KEYS = ("max_age", "include_subdomains", "preload")
TICKET_KEYS = ("enabled", "rotation", "key_file")
TICKET_KEY_FILE_SIZE = 80       # nginx's ssl_session_ticket_key: name 16, HMAC 32, AES 32

PROTOCOLS = ("TLSv1.2", "TLSv1.3")
# Spelling (lowercase, without v . _ space) -> how it is refused.
_INSECURE = {"ssl2": "SSLv2", "ssl3": "SSLv3", "tls1": "TLSv1.0", "tls10": "TLSv1.0",
             "tls11": "TLSv1.1"}

TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                "TLS_AES_128_CCM_8_SHA256")

# Accepted spellings (lowercase) -> OpenSSL's group name.
CURVES = {
    "x25519": "X25519", "x448": "X448",
    "p-256": "prime256v1", "prime256v1": "prime256v1", "secp256r1": "prime256v1",
    "p-384": "secp384r1", "secp384r1": "secp384r1",
    "p-521": "secp521r1", "secp521r1": "secp521r1",
}
CURVES_HINT = "X25519, X448, P-256, P-384, P-521"

ONE_YEAR = 31536000            # seconds; HSTS preload's minimum max-age
TICKET_ROTATION_MIN = 60.0
TICKET_ROTATION_MAX = 7 * 86400.0

# TLS 1.2 cipher names (OpenSSL's) that are broken or authenticate no one.
_WEAK_CIPHER = re.compile(r"NULL|^ADH-|^AECDH-|RC4|DES|^EXP|MD5")
_YEARS = re.compile(r"\s*([0-9]+)\s*y\s*")


def _sub(path, name):
    return f"{path}.{name}"


def _later(keys, *names):
    """The name among `names` (all in keys) written last in the file."""
    return max(names, key=lambda k: (keys[k][0].start_mark.line,
                                     keys[k][0].start_mark.column))


# --------------------------------------------------------------------------
# A site's `tls`

def compile_site_tls(ctx, node, path, server_names=()):
    """Validate a site's `tls:` at `node`; return a SiteTLS or None.

    `server_names` are the site's (normalised) server names: a warning is
    given for each one that no certificate of the site covers.
    """
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping with cert and key (or certificates), "
                  f"got {ctx.describe(node)}")
        return None
    from .. import tlscheck    # (pyOpenSSL and cryptography: only for TLS sites)
    start = len(ctx.problems)
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    tls = SiteTLS(certificates=[], mark=ctx.mark(node))

    # -- certificates --
    entries = []               # [(Certificate, {field: node}, {field: path})]
    single = [k for k in ("cert", "key") if k in keys]
    if single and "certificates" in keys:
        later = _later(keys, "certificates", *single)
        ctx.error(keys[later][0], _sub(path, later), "cert/key and certificates "
                  "exclude each other: give one certificate with cert and key, or a "
                  "list of them under certificates")
    elif "certificates" in keys:
        if "ocsp_file" in keys:
            ctx.error(keys["ocsp_file"][0], _sub(path, "ocsp_file"), "with certificates, "
                      "give ocsp_file in the item of the certificate it is for")
        entries = _certificate_list(ctx, keys["certificates"][1],
                                    _sub(path, "certificates"))
    elif single:
        entry = _certificate(ctx, node, keys, path, mark_node=keys[single[0]][0])
        if entry is not None:
            entries = [entry]
    elif "ocsp_file" in keys:
        ctx.error(node, path, "a certificate is required: give cert and key (ocsp_file "
                  "goes with them)")
    else:
        ctx.error(node, path, "a certificate is required: give cert and key, or "
                  "certificates (a list of {cert, key})")

    # -- protocol settings --
    if "protocols" in keys:
        protocols = _protocols(ctx, keys["protocols"][1], _sub(path, "protocols"))
        if protocols is not None:
            tls.protocols = protocols
    if "ciphers" in keys:
        ciphers = _ciphers(ctx, keys["ciphers"][1], _sub(path, "ciphers"))
        if ciphers is not None:
            tls.ciphers = ciphers
    if "ciphersuites" in keys:
        suites = _ciphersuites(ctx, keys["ciphersuites"][1], _sub(path, "ciphersuites"))
        if suites is not None:
            tls.ciphersuites = suites
    if "curves" in keys:
        curves = _curves(ctx, keys["curves"][1], _sub(path, "curves"))
        if curves is not None:
            tls.curves = curves
    for name in ("ocsp_stapling", "redirect"):
        if name in keys:
            value = ctx.boolean(keys[name][1], _sub(path, name))
            if value is not None:
                setattr(tls, name, value)
    if "hsts" in keys:
        value = _hsts(ctx, keys["hsts"][1], _sub(path, "hsts"))
        if value is not False:
            tls.hsts = value

    if "ciphers" in keys and "TLSv1.2" not in tls.protocols:
        ctx.warning(keys["ciphers"][0], _sub(path, "ciphers"), "ciphers is for TLS 1.2, "
                    "which protocols leaves out: it has no effect")
    if "ciphersuites" in keys and "TLSv1.3" not in tls.protocols:
        ctx.warning(keys["ciphersuites"][0], _sub(path, "ciphersuites"), "ciphersuites is "
                    "for TLS 1.3, which protocols leaves out: it has no effect")

    # -- the certificates' files --
    now = time.time()
    checked = []               # [(Certificate, CheckResult, nodes, paths)]
    for cert, nodes, paths in entries:
        result = tlscheck.check_certificate(cert.cert, cert.key, (), now, cert.ocsp_file)
        for finding in result.errors:
            where = getattr(finding, "field", "cert")
            ctx.error(nodes.get(where, nodes["cert"]), paths.get(where, paths["cert"]),
                      str(finding))
        for finding in result.warnings:
            where = getattr(finding, "field", "cert")
            ctx.warning(nodes.get(where, nodes["cert"]), paths.get(where, paths["cert"]),
                        str(finding))
        cert.key_type = result.key_type
        cert.names = list(result.names)
        cert.not_after = result.not_after
        cert.ocsp_url = result.ocsp_url
        checked.append((cert, result, nodes, paths))
        tls.certificates.append(cert)

    _check_key_types(ctx, checked)
    _check_stapling(ctx, keys, path, tls, checked)
    _check_coverage(ctx, server_names, checked)
    if "ciphers" in keys and "TLSv1.2" in tls.protocols:
        _check_cipher_auth(ctx, keys["ciphers"][1], _sub(path, "ciphers"), tls, checked)

    if len(ctx.problems) > start or not tls.certificates:
        return None
    return tls


def _certificate_list(ctx, node, path):
    if ctx.kind(node) != "seq":
        ctx.error(node, path, "expected a list of {cert, key} mappings, got "
                  f"{ctx.describe(node)}")
        return []
    if not node.value:
        ctx.error(node, path, "expected at least one certificate")
        return []
    out = []
    for i, item in enumerate(node.value):
        ipath = f"{path}[{i}]"
        if ctx.kind(item) != "map":
            ctx.error(item, ipath, "expected a mapping with cert and key (and optionally "
                      f"ocsp_file), got {ctx.describe(item)}")
            continue
        keys = ctx.mapping(item, ipath, CERT_KEYS)
        if keys is None:
            continue
        entry = _certificate(ctx, item, keys, ipath, mark_node=item)
        if entry is not None:
            out.append(entry)
    return out


def _certificate(ctx, node, keys, path, mark_node):
    """cert, key and ocsp_file of `keys` -> (Certificate, nodes, paths) or None."""
    values, nodes, paths = {}, {}, {}
    ok = True
    for name in CERT_KEYS:
        if name not in keys:
            if name != "ocsp_file":
                ctx.error(node, _sub(path, name), "required key is missing (a "
                          "certificate needs cert and key)")
                ok = False
            continue
        vnode = keys[name][1]
        nodes[name], paths[name] = vnode, _sub(path, name)
        values[name] = ctx.path(vnode, paths[name])
        ok &= values[name] is not None
    if not ok:
        return None
    cert = Certificate(cert=values["cert"], key=values["key"],
                       ocsp_file=values.get("ocsp_file"), mark=ctx.mark(mark_node))
    return cert, nodes, paths


def _kind(key_type: str) -> str:
    """The OpenSSL slot of a key type: "RSA", "ECDSA", "Ed25519", ..."""
    return key_type.split()[0] if key_type else ""


def _check_key_types(ctx, checked):
    seen = {}                  # kind -> (Certificate, line)
    for cert, result, nodes, paths in checked:
        kind = _kind(result.key_type)
        if not kind:
            continue
        if kind in seen:
            ctx.error(nodes["cert"], paths["cert"], f"a second {kind} certificate (the "
                      f"first is at line {seen[kind]}): OpenSSL keeps one certificate "
                      "per key type; give at most one ECDSA and one RSA certificate")
            continue
        seen[kind] = cert.mark[1]
    if seen and not {"ECDSA", "RSA"} & set(seen):
        cert, result, nodes, paths = checked[0]
        ctx.warning(nodes["cert"], paths["cert"], f"only {', '.join(seen)} certificates: "
                    "browsers do not accept them; add an ECDSA P-256 or RSA 2048 "
                    "certificate")


def _check_stapling(ctx, keys, path, tls, checked):
    explicit = "ocsp_stapling" in keys
    for cert, result, nodes, paths in checked:
        if not result.key_type:
            continue           # the file could not be read: reported
        if result.must_staple and not tls.ocsp_stapling:
            ctx.error(keys["ocsp_stapling"][1], _sub(path, "ocsp_stapling"),
                      f"the certificate {cert.cert} requires OCSP stapling (OCSP "
                      "Must-Staple): clients refuse it without a stapled response")
        if not tls.ocsp_stapling:
            if cert.ocsp_file:
                ctx.warning(nodes["ocsp_file"], paths["ocsp_file"], "ocsp_file is not "
                            "used: ocsp_stapling is off")
            continue
        if cert.ocsp_file:
            continue
        if not result.ocsp_url:
            if explicit:
                ctx.warning(keys["ocsp_stapling"][1], _sub(path, "ocsp_stapling"),
                            f"the certificate {cert.cert} names no OCSP responder and no "
                            "ocsp_file is given: nothing will be stapled for it")
        elif result.issuer_pem is None and result.chain_length > 1:
            ctx.warning(nodes["cert"], paths["cert"], "OCSP stapling needs the issuer's "
                        f"certificate right after the leaf in {cert.cert} (to ask "
                        f"{result.ocsp_url}): nothing will be stapled for it")


def _check_coverage(ctx, server_names, checked):
    from .. import tlscheck
    usable = [(c, r, n, p) for c, r, n, p in checked if r.key_type]
    if not usable:
        return
    for name in server_names:
        missing = [(c, r, n, p) for c, r, n, p in usable
                   if not tlscheck.name_covered(name, r.names, r.ips)]
        if not missing:
            continue
        if len(missing) == len(usable):
            cert, result, nodes, paths = usable[0]
            ctx.warning(nodes["cert"], paths["cert"], f"no certificate of this site "
                        f"covers the server name '{name}' (the certificate covers "
                        f"{_names_text(result)}): clients asking for it get a name "
                        "mismatch")
            continue
        for cert, result, nodes, paths in missing:
            ctx.warning(nodes["cert"], paths["cert"], f"this {result.key_type} "
                        f"certificate does not cover the server name '{name}' (it covers "
                        f"{_names_text(result)}), which another certificate of the site "
                        "does: clients that choose this one get a name mismatch")


def _names_text(result, most=6):
    names = list(result.names) + list(result.ips)
    if not names:
        return "no names"
    if len(names) > most:
        return ", ".join(names[:most]) + f" and {len(names) - most} more"
    return ", ".join(names)


# -- protocols, ciphers, suites, curves -------------------------------------------

def _list_items(ctx, node, path, what, separator=":"):
    """A list of strings, or one string split at `separator` -> [(text, node, path)]."""
    kind = ctx.kind(node)
    if kind == "str":
        parts = [p.strip() for p in node.value.split(separator)] if separator else \
            [node.value.strip()]
        if not any(parts):
            ctx.error(node, path, f"expected at least one {what}")
            return None
        if not all(parts):
            ctx.error(node, path, f"an empty {what} in '{node.value}'")
            return None
        return [(p, node, path) for p in parts]
    if kind == "seq":
        if not node.value:
            ctx.error(node, path, f"expected at least one {what}")
            return None
        out = []
        ok = True
        for i, item in enumerate(node.value):
            ipath = f"{path}[{i}]"
            text = ctx.string(item, ipath)
            if text is None:
                ok = False
                continue
            out.append((text.strip(), item, ipath))
        return out if ok else None
    ctx.error(node, path, f"expected a {what} or a list of them, got {ctx.describe(node)}")
    return None


def _did_you_mean(text, candidates):
    close = difflib.get_close_matches(text, candidates, n=1)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[m] for m in difflib.get_close_matches(text.lower(), list(lowered), n=1)]
    return f"; did you mean '{close[0]}'?" if close else ""


def _protocols(ctx, node, path):
    items = _list_items(ctx, node, path, "protocol", separator=None)
    if items is None:
        return None
    chosen = {}
    ok = True
    for text, inode, ipath in items:
        squashed = re.sub(r"[v._ ]", "", text.lower())
        if text in PROTOCOLS:
            if text in chosen:
                ctx.error(inode, ipath, f"{text} is already listed (line {chosen[text]})")
                ok = False
                continue
            chosen[text] = inode.start_mark.line + 1
        elif squashed in _INSECURE:
            ctx.error(inode, ipath, f"{_INSECURE[squashed]} is insecure and refused "
                      "(RFC 8996 deprecates TLS 1.0 and 1.1; SSL is broken): use "
                      "TLSv1.2 and TLSv1.3")
            ok = False
        else:
            hint = _did_you_mean(text, PROTOCOLS) or f" (known: {', '.join(PROTOCOLS)})"
            ctx.error(inode, ipath, f"unknown protocol '{text}'{hint}")
            ok = False
    if not ok:
        return None
    return [p for p in PROTOCOLS if p in chosen]


def _resolve_ciphers(text):
    """OpenSSL's TLS 1.2 cipher names for a cipher list, or None if nothing matches."""
    from OpenSSL import SSL
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    try:
        ctx.set_cipher_list(text.encode("ascii", "replace"))
    except SSL.Error:
        return None
    names = SSL.Connection(ctx).get_cipher_list()
    return [n for n in names if not n.startswith("TLS_")]


_ALL_CIPHERS = None


def _all_cipher_names():
    global _ALL_CIPHERS
    if _ALL_CIPHERS is None:
        _ALL_CIPHERS = _resolve_ciphers("ALL:COMPLEMENTOFALL") or []
    return _ALL_CIPHERS


def _ciphers(ctx, node, path):
    """An OpenSSL cipher list (a string, or a list joined with ':')."""
    items = _list_items(ctx, node, path, "cipher")
    if items is None:
        return None
    ok = True
    for text, inode, ipath in items:
        if any(c.isspace() for c in text) or not text.isascii() or not text.isprintable():
            ctx.error(inode, ipath, f"'{text}' is not a cipher name: separate ciphers with "
                      "':' or give a list")
            ok = False
        elif text.startswith("TLS_") and text in TLS13_SUITES:
            ctx.error(inode, ipath, f"{text} is a TLS 1.3 suite: list it under "
                      "ciphersuites (ciphers is for TLS 1.2)")
            ok = False
        elif text[:1] not in "!-+@" and "@" not in text and _resolve_ciphers(text) is None:
            # A single word that matches nothing: OpenSSL would skip it silently.
            hint = _did_you_mean(text, _all_cipher_names())
            ctx.error(inode, ipath, f"no cipher matches '{text}'{hint} (OpenSSL cipher "
                      "names such as ECDHE-ECDSA-AES128-GCM-SHA256, or expressions "
                      "such as ECDHE+AESGCM)")
            ok = False
    if not ok:
        return None
    joined = ":".join(text for text, _, _ in items)
    resolved = _resolve_ciphers(joined)
    if not resolved:
        ctx.error(node, path, f"no TLS 1.2 cipher matches '{joined}'")
        return None
    weak = [n for n in resolved if _WEAK_CIPHER.search(n)]
    if weak:
        shown = ", ".join(weak[:5]) + (f" and {len(weak) - 5} more" if len(weak) > 5 else "")
        ctx.warning(node, path, f"the cipher list enables broken or anonymous ciphers: "
                    f"{shown}; exclude them (for example with :!aNULL:!eNULL:!RC4:!3DES)")
    return joined


def _cipher_auth(name):
    """Which certificate a TLS 1.2 cipher (OpenSSL name) can be used with."""
    if name.startswith(("ADH-", "AECDH-")) or "PSK" in name or "SRP" in name:
        return None
    if "ECDSA" in name:
        return "ECDSA"
    if "DSS" in name:
        return "DSA"
    return "RSA"


# Key type's slot -> the cipher authentication it needs in TLS 1.2.
_AUTH_FOR_KIND = {"RSA": "RSA", "ECDSA": "ECDSA", "Ed25519": "ECDSA", "Ed448": "ECDSA",
                  "DSA": "DSA"}


def _check_cipher_auth(ctx, node, path, tls, checked):
    resolved = _resolve_ciphers(tls.ciphers)
    if not resolved:
        return
    auths = {_cipher_auth(n) for n in resolved}
    kinds = [_kind(r.key_type) for _, r, _, _ in checked if r.key_type]
    unusable = [k for k in kinds if _AUTH_FOR_KIND.get(k) not in auths]
    if not unusable:
        return
    for kind in unusable:
        auth = _AUTH_FOR_KIND.get(kind, kind)
        message = (f"no cipher in the list can be used with the {kind} certificate "
                   f"(TLS 1.2 needs ECDHE-{auth}-... ciphers for it)")
        if len(unusable) == len(kinds) and tls.protocols == ["TLSv1.2"]:
            ctx.error(node, path, message + ": no TLS handshake could succeed")
        else:
            ctx.warning(node, path, message + ": TLS 1.2 clients cannot use it")


def _ciphersuites(ctx, node, path):
    items = _list_items(ctx, node, path, "TLS 1.3 suite")
    if items is None:
        return None
    seen = {}
    ok = True
    for text, inode, ipath in items:
        if text in TLS13_SUITES:
            if text in seen:
                ctx.error(inode, ipath, f"{text} is already listed")
                ok = False
            seen[text] = True
            continue
        if not text.startswith("TLS_") and _resolve_ciphers(text):
            ctx.error(inode, ipath, f"{text} is a TLS 1.2 cipher: list it under ciphers "
                      "(ciphersuites is for TLS 1.3)")
        else:
            hint = _did_you_mean(text, TLS13_SUITES) or \
                f" (TLS 1.3 suites: {', '.join(TLS13_SUITES)})"
            ctx.error(inode, ipath, f"unknown TLS 1.3 suite '{text}'{hint}")
        ok = False
    if not ok:
        return None
    return ":".join(seen)


def _curves(ctx, node, path):
    items = _list_items(ctx, node, path, "curve")
    if items is None:
        return None
    out = {}                   # OpenSSL name -> as written
    ok = True
    for text, inode, ipath in items:
        name = CURVES.get(text.lower())
        if name is None:
            spellings = ["X25519", "X448", "P-256", "P-384", "P-521", "prime256v1",
                         "secp256r1", "secp384r1", "secp521r1"]
            hint = _did_you_mean(text, spellings) or f" (known: {CURVES_HINT})"
            ctx.error(inode, ipath, f"unknown curve '{text}'{hint}")
            ok = False
        elif name in out:
            same = "" if out[name] == text else f" (as {out[name]})"
            ctx.error(inode, ipath, f"{text} is already listed{same}")
            ok = False
        else:
            out[name] = text
    if not ok:
        return None
    return list(out)


# -- HSTS ---------------------------------------------------------------------------

def hsts_value(max_age: int, include_subdomains: bool = False, preload: bool = False) -> str:
    """The Strict-Transport-Security header value."""
    value = f"max-age={int(max_age)}"
    if include_subdomains:
        value += "; includeSubDomains"
    if preload:
        value += "; preload"
    return value


def _hsts(ctx, node, path):
    """hsts: on | off | {max_age, include_subdomains, preload} -> header value,
    None (off), or False after reporting."""
    kind = ctx.kind(node)
    if kind == "bool":
        return hsts_value(ONE_YEAR) if ctx.boolean(node, path) else None
    if kind == "str" and node.value in ("on", "off"):
        return hsts_value(ONE_YEAR) if node.value == "on" else None
    if kind != "map":
        ctx.error(node, path, "expected on, off or a mapping such as {max_age: 1y, "
                  f"include_subdomains: on}}; got {ctx.describe(node)}")
        return False
    keys = ctx.mapping(node, path, HSTS_KEYS)
    if keys is None:
        return False
    ok = True
    max_age = ONE_YEAR
    flags = {"include_subdomains": False, "preload": False}
    if "max_age" in keys:
        value = _max_age(ctx, keys["max_age"][1], _sub(path, "max_age"))
        if value is None:
            ok = False
        else:
            max_age = value
    for name in flags:
        if name in keys:
            value = ctx.boolean(keys[name][1], _sub(path, name))
            if value is None:
                ok = False
            else:
                flags[name] = value
    if ok and flags["preload"]:
        pnode, ppath = keys["preload"][0], _sub(path, "preload")
        if not flags["include_subdomains"]:
            ctx.error(pnode, ppath, "preload requires include_subdomains: on "
                      "(hstspreload.org refuses the domain otherwise)")
            ok = False
        if max_age < ONE_YEAR:
            ctx.error(pnode, ppath, f"preload requires a max_age of at least 1y "
                      f"({ONE_YEAR} seconds), got {max_age} (hstspreload.org refuses "
                      "the domain otherwise)")
            ok = False
    if not ok:
        return False
    return hsts_value(max_age, flags["include_subdomains"], flags["preload"])


def _max_age(ctx, node, path):
    """A duration (1y, 180d, 12h, or seconds) -> whole seconds, or None."""
    kind = ctx.kind(node)
    value = None
    if kind == "str" and (m := _YEARS.fullmatch(node.value)):
        value = int(m.group(1)) * ONE_YEAR
    elif kind in ("int", "float", "str"):
        try:
            value = int(round(parse_duration(node.value if kind == "str" else
                                             float(node.value))))
        except ValueError:
            value = None
    if value is None:
        ctx.error(node, path, "expected a duration such as 1y, 180d or 31536000 "
                  f"(seconds), got {ctx.describe(node)}")
    return value


# --------------------------------------------------------------------------
# Top-level `tls_tickets`

def compile_tickets(ctx, node, path="tls_tickets"):
    """tls_tickets: on | off | {enabled, rotation, key_file} -> TicketKeys (the
    defaults, after reporting, when the value is wrong)."""
    tickets = TicketKeys()
    kind = ctx.kind(node)
    if kind == "bool":
        tickets.enabled = ctx.boolean(node, path)
        return tickets
    if kind == "str" and node.value in ("on", "off"):
        tickets.enabled = node.value == "on"
        return tickets
    if kind != "map":
        ctx.error(node, path, "expected on, off or a mapping such as {enabled: on, "
                  f"rotation: 1h}}; got {ctx.describe(node)}")
        return tickets
    keys = ctx.mapping(node, path, TICKET_KEYS)
    if keys is None:
        return tickets
    if "enabled" in keys:
        value = ctx.boolean(keys["enabled"][1], _sub(path, "enabled"))
        if value is not None:
            tickets.enabled = value
    if "rotation" in keys:
        rnode, rpath = keys["rotation"][1], _sub(path, "rotation")
        value = ctx.duration(rnode, rpath, positive=True)
        if value is not None:
            if not TICKET_ROTATION_MIN <= value <= TICKET_ROTATION_MAX:
                ctx.error(rnode, rpath, f"must be between 1m and 7d, got {rnode.value}")
            else:
                tickets.rotation = value
    if "key_file" in keys:
        _ticket_key_files(ctx, keys["key_file"][1], _sub(path, "key_file"), tickets)
    return tickets


def _ticket_key_files(ctx, node, path, tickets):
    """key_file: a path or a list of two: the key that encrypts, then one
    that still decrypts. Each file holds 80 random bytes, as nginx's
    ssl_session_ticket_key (`openssl rand 80 > FILE`): name, HMAC-SHA256
    key, AES-256 key. Read here, by the master: a worker never opens it."""
    seq = ctx.kind(node) == "seq"
    items = node.value if seq else [node]
    if seq and not 1 <= len(items) <= 2:
        ctx.error(node, path, "expected one file (the key) or two (the key, then the "
                  f"previous one, still accepted); got {len(items)}")
        return
    files, keys = [], []
    for i, item in enumerate(items):
        ipath = f"{path}[{i}]" if seq else path
        full = ctx.path(item, ipath)
        if full is None:
            return
        try:
            with open(full, "rb") as f:
                data = f.read(TICKET_KEY_FILE_SIZE + 1)
        except OSError as exc:
            ctx.error(item, ipath, f"cannot read {full}: {exc.strerror or exc}")
            return
        if len(data) != TICKET_KEY_FILE_SIZE:
            ctx.error(item, ipath, f"{full} holds {len(data)}{'+' if len(data) > 80 else ''} "
                      f"bytes; a ticket key file is {TICKET_KEY_FILE_SIZE} random bytes "
                      f"(openssl rand {TICKET_KEY_FILE_SIZE} > {full})")
            return
        files.append(full)
        # to sws_ticket_key_t's order: name, AES, HMAC
        keys.append(data[:16] + data[48:80] + data[16:48])
    tickets.key_file = files
    tickets.keys = keys
