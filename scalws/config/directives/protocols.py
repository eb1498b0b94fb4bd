"""The server-wide protocol blocks: `limits:` (every protocol's request
bounds and timeouts), `http2:` and `http3:` (docs/configuration.md); each
reads its mapping into the model's dataclass, errors through the loader's
context with file:line and the key."""
from __future__ import annotations

from ..model import Http2, Http3, Limits
from ..units import format_size

LIMIT_KEYS = tuple(Limits.__dataclass_fields__)
HTTP2_KEYS = tuple(Http2.__dataclass_fields__)
HTTP3_KEYS = tuple(Http3.__dataclass_fields__)


# (reader, arguments) per limit; ranges are documented in docs/configuration.md.
_LIMITS = {
    "max_header_bytes": ("size", dict(lo=1 << 10, hi=1 << 20)),
    "max_headers": ("integer", dict(lo=1, hi=1000)),
    "max_uri_bytes": ("size", dict(lo=256, hi=1 << 20)),
    "max_body_bytes": ("size", dict(lo=1, hi=1 << 62)),
    "header_timeout": ("duration", dict(positive=True)),
    "body_timeout": ("duration", dict(positive=True)),
    "keepalive_timeout": ("duration", dict()),
    "send_timeout": ("duration", dict(positive=True)),
    "keepalive_requests": ("integer", dict(lo=1, hi=(1 << 31) - 1)),
    "max_connections": ("integer", dict(lo=1, hi=1_000_000)),
}


def limits(ctx, node, limits: Limits) -> None:
    keys = ctx.mapping(node, "limits", LIMIT_KEYS)
    if keys is None:
        return
    for name, (reader, kwargs) in _LIMITS.items():
        if name not in keys:
            continue
        vnode = keys[name][1]
        kpath = f"limits.{name}"
        if (name == "max_body_bytes" and ctx.kind(vnode) in ("int", "str")
                and vnode.value.strip() == "0"):
            # nginx's client_max_body_size 0 means "no limit"; refuse the
            # ambiguity instead of guessing either meaning.
            ctx.error(vnode, kpath, "0 is not allowed: to accept large bodies "
                      "give a large size such as 1g (nginx's 0 = unlimited has "
                      "no equivalent)")
            continue
        value = getattr(ctx, reader)(vnode, kpath, **kwargs)
        if value is not None:
            setattr(limits, name, value)
    # A request line is part of the header block: the URI limit cannot exceed
    # it. When only the header limit is given, the URI default follows it down.
    if "max_uri_bytes" in keys:
        if limits.max_uri_bytes > limits.max_header_bytes:
            ctx.error(keys["max_uri_bytes"][1], "limits.max_uri_bytes",
                      f"must not exceed max_header_bytes "
                      f"({format_size(limits.max_header_bytes)})")
    else:
        limits.max_uri_bytes = min(limits.max_uri_bytes, limits.max_header_bytes)


# (reader, arguments) per http2 key; ranges are documented in
# docs/configuration.md. Windows: RFC 9113 §6.9.2 (at most 2^31-1; the
# connection's never below the RFC's 65,535 start); the budgets fit the C
# side's thousandths of a frame in 32 bits.
_WINDOW_MAX = (1 << 31) - 1
_HTTP2 = {
    "max_concurrent_streams": ("integer", dict(lo=1, hi=10_000)),
    "stream_window": ("size", dict(lo=1 << 10, hi=_WINDOW_MAX)),
    "connection_window": ("size", dict(lo=65535, hi=_WINDOW_MAX)),
    "max_header_list_size": ("size", dict(lo=1 << 10, hi=2 << 20)),
    "header_table_size": ("size", dict(lo=0, hi=64 << 10)),
    "max_continuations": ("integer", dict(lo=1, hi=1000)),
    "unsent_limit": ("size", dict(lo=0, hi=64 << 20)),
    "reset_burst": ("integer", dict(lo=1, hi=1_000_000)),
    "reset_rate": ("integer", dict(lo=1, hi=1_000_000)),
    "frame_burst": ("integer", dict(lo=1, hi=1_000_000)),
    "frame_rate": ("integer", dict(lo=1, hi=1_000_000)),
}


def http2(ctx, node, http2: Http2) -> None:
    keys = ctx.mapping(node, "http2", HTTP2_KEYS)
    if keys is None:
        return
    for name, (reader, kwargs) in _HTTP2.items():
        if name in keys:
            value = getattr(ctx, reader)(keys[name][1], f"http2.{name}", **kwargs)
            if name == "unsent_limit" and value is not None and 0 < value < 4096:
                # a few bytes would wake the worker for every few bytes sent
                ctx.error(keys[name][1], "http2.unsent_limit",
                          f"expected 0 (none) or at least 4k, got {keys[name][1].value}")
                value = None
            if value is not None:
                setattr(http2, name, value)


# (reader, arguments) per http3 key (docs/configuration.md, "http3"); QUIC's
# flow-control limits are varints (RFC 9000 §16), ours far below them.
_HTTP3 = {
    "max_concurrent_streams": ("integer", dict(lo=1, hi=10_000)),
    "stream_window": ("size", dict(lo=1 << 10, hi=1 << 30)),
    "connection_window": ("size", dict(lo=64 << 10, hi=1 << 30)),
    "idle_timeout": ("duration", dict(lo=1.0, hi=3600.0)),
    "handshake_timeout": ("duration", dict(lo=1.0, hi=600.0)),
    "max_connections": ("integer", dict(lo=1, hi=1_000_000)),
    "qpack_table": ("size", dict(lo=0, hi=64 << 10)),
    "qpack_blocked_streams": ("integer", dict(lo=0, hi=10_000)),
    "qpack_encoder_table": ("size", dict(lo=0, hi=64 << 10)),
    "alt_svc_max_age": ("integer", dict(lo=0, hi=1 << 31)),
    "retry_above": ("integer", dict(lo=0, hi=1_000_000)),
    "early_data": ("boolean", {}),
    "early_data_window": ("duration", dict(lo=1.0, hi=3600.0)),
    "gso": ("boolean", {}),
}


def http3(ctx, node, http3: Http3) -> None:
    keys = ctx.mapping(node, "http3", HTTP3_KEYS)
    if keys is None:
        return
    for name, (reader, kwargs) in _HTTP3.items():
        if name in keys:
            node_ = keys[name][1]
            if name == "retry_above" and ctx.kind(node_) in ("bool", "str") and \
                    str(node_.value).lower() in ("off", "false", "no"):
                http3.retry_above = None  # YAML's `off` is false
                continue
            value = getattr(ctx, reader)(node_, f"http3.{name}", **kwargs)
            if value is not None:
                setattr(http3, name, value)
            if name == "qpack_encoder_table" and value:
                ctx.warning(node_, "http3.qpack_encoder_table",
                            "has no effect: our QPACK encoder uses the static table and "
                            "literals only (ADR 0034)")
