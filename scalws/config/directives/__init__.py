"""Config halves of the handlers, one module per handler kind.

Each module exposes `compile(ctx, node, path)`, which validates the value of
its route key (the YAML node), reports problems through `ctx` (the loader's
context) and returns the model object the runtime half consumes, or None.
The route walker finds the one key of a route that names a handler and calls
its entry here. Nothing in this package imports compiled code.
"""
from __future__ import annotations

from . import app, fastcgi, proxy, respond, static

# Handler kinds this version can configure: route key -> compile function.
HANDLERS = {
    "respond": respond.compile,
    "static": static.compile,
    "proxy": proxy.compile,
    "fastcgi": fastcgi.compile,
    "app": app.compile,
}

# Route keys that are not handlers although one might write them as such,
# -> the message that refuses them (rather than "unknown key").
UNAVAILABLE_HANDLERS = {
    "cache": "'cache' is not a handler: it goes inside a proxy or fastcgi route, as "
             "proxy: {upstream: NAME, cache: {zone: NAME}}",
}
