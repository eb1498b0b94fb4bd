"""The configuration loader on sites, listen, routes and respond: each
problem with its exact message and FILE:LINE:COLUMN position (the file
shown as F), and what loads."""
import pytest

from tests.unit.configlib import load, one_problem, problems


# --------------------------------------------------------------------------
# Sites and listen

@pytest.mark.parametrize("listen, expected", [
    ("example.com:80",
     "'example.com' is a host name: scalws resolves no names when loading; "
     "use an IP address (or localhost)"),
    ("300.1.1.1:80", "'300.1.1.1' is not an IPv4 address"),
    ("::1:80", "an IPv6 address goes in brackets, as in [::1]:8080"),
    ("[::1]", "expected [address]:port, got '[::1]' (the port is missing)"),
    ("[::1:80", "missing ']' after the IPv6 address in '[::1:80'"),
    ("[nope]:80", "'nope' is not an IPv6 address"),
    ("localhost", "expected host:port, :port or port, got 'localhost' (the port is missing)"),
    (":0", "port must be between 1 and 65535, got 0"),
    (":65536", "port must be between 1 and 65535, got 65536"),
    (":http", "'http' is not a port number"),
    ("unix:", "expected a socket path after 'unix:'"),
    (":443 tls", "listen option 'tls' needs the site's certificates: add tls: {cert: FILE, key: FILE} to the site"),
    (":443 ssl", "the listen option is called 'tls' in scalws (nginx's 'ssl')"),
    (":443 http2", "HTTP/2 is on by default on TLS listeners (ALPN h2); write 'h2c' for cleartext "
                   "HTTP/2 with prior knowledge, or 'http2=off' to refuse HTTP/2 on a TLS listener"),
    (":80 http2=on", "'http2=' applies to TLS listeners (ALPN); for cleartext HTTP/2 write 'h2c'"),
    (":80 http2=maybe", "listen option 'http2=maybe' is malformed; write http2=on or http2=off"),
    (":80 h2c=1", "listen option 'h2c=1' is malformed; write h2c"),
    (":80 h2c h2c", "listen option 'h2c' is given twice"),
    (":443 tls h2c", "'h2c' is cleartext HTTP/2; a TLS listener offers h2 through ALPN already "
                     "(remove 'h2c', or 'tls')"),
    (":80 default_server", "unknown listen option 'default_server'; did you mean 'default'?"),
    (":80 reuseport", "unknown listen option 'reuseport' (options: default, tls, h2c, http2=off, "
                      "quic, backlog=N)"),
    (":443 quic tls", "'quic' is a UDP listener for HTTP/3 (TLS 1.3 is part of QUIC): 'tls' "
                      "applies to TCP listeners; list the TCP address apart (e.g. \":443 tls\" "
                      "beside \":443 quic\")"),
    (":443 quic backlog=10", "'quic' is a UDP listener for HTTP/3 (TLS 1.3 is part of QUIC): "
                             "'backlog' applies to TCP listeners; list the TCP address apart "
                             "(e.g. \":443 tls\" beside \":443 quic\")"),
    ("unix:/run/x.sock quic", "QUIC runs over UDP: it cannot listen on a unix socket"),
    (":80 h2", "unknown listen option 'h2'; did you mean 'h2c'?"),
    (":80 backlog=0", "backlog must be an integer between 1 and 65535, got '0'"),
    (":80 backlog=many", "backlog must be an integer between 1 and 65535, got 'many'"),
    (":80 backlog", "listen option 'backlog' is malformed; write backlog=N"),
    (":80 default=yes", "listen option 'default=yes' is malformed; write default"),
    (":80 default default", "listen option 'default' is given twice"),
    (" ", "must not be empty"),
])
def test_listen_problems(tmp_path, listen, expected):
    text = f"sites:\n  - listen: '{listen}'\n    routes: [{{path: /, respond: 204}}]\n"
    assert one_problem(tmp_path, text) == f"F:2:13: sites[0].listen: {expected}"


def test_listen_h2_options(tmp_path):
    cfg = load(tmp_path, """\
        sites:
          - listen: [":8080 h2c", "127.0.0.1:8081"]
            routes: [{path: /, respond: 204}]
    """)
    assert [(l.h2c, l.serves_h2) for l in cfg.sites[0].listen] == [(True, True), (False, False)]
    assert one_problem(tmp_path, """\
        sites:
          - listen: [":8080 h2c"]
            routes: [{path: /, respond: 204}]
          - listen: [":8080"]
            server_names: [b.test]
            routes: [{path: /, respond: 204}]
    """) == ("F:4:14: sites[1].listen[0]: 0.0.0.0:8080 serves HTTP/2 at line 2: every site on "
             "one address must agree on 'h2c' / 'http2='")


def test_listen_unix_path_too_long(tmp_path):
    sock = "/tmp/" + "s" * 120
    text = f"sites:\n  - listen: 'unix:{sock}'\n    routes: [{{path: /, respond: 204}}]\n"
    assert one_problem(tmp_path, text) == (
        f"F:2:13: sites[0].listen: the socket path {sock} is longer than 107 bytes "
        "(the limit of a unix socket address)")


def test_listen_list_problems(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: [":80", "0.0.0.0:80", {port: 80}]
            routes: [{path: /, respond: 204}]
          - listen: []
            routes: [{path: /, respond: 204}]
          - routes: [{path: /, respond: 204}]
    """) == [
        "F:2:21: sites[0].listen[1]: '0.0.0.0:80' is already listed in this site (line 2)",
        "F:2:35: sites[0].listen[2]: expected an address such as 127.0.0.1:8080, :80, "
        "[::]:80 or unix:/run/scalws.sock, got a mapping",
        "F:4:13: sites[1].listen: expected at least one listen address",
        "F:6:5: sites[2].listen: required key is missing",
    ]


def test_sites_shape_problems(tmp_path):
    assert one_problem(tmp_path, "sites: {listen: 80}\n") == \
        "F:1:8: sites: expected a list of sites, got a mapping"
    assert one_problem(tmp_path, "sites: []\n") == "F:1:8: sites: expected at least one site"
    assert one_problem(tmp_path, "sites:\n  - \n") == \
        "F:2:4: sites[0]: expected a mapping, got null"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n    routes: []\n") == \
        "F:3:13: sites[0].routes: expected at least one route"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n") == \
        "F:2:5: sites[0].routes: required key is missing"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n    routes: {path: /}\n") == \
        "F:3:13: sites[0].routes: expected a list of routes, got a mapping"


def test_two_defaults_on_one_address(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80 default"
            routes: [{path: /, respond: 204}]
          - listen: ["127.0.0.1:81", "80 default"]
            routes: [{path: /, respond: 204}]
    """) == "F:4:30: sites[1].listen[1]: 0.0.0.0:80 already has a default site: sites[0] (line 2)"


def test_server_name_repeated_on_shared_address(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80"
            server_names: [a.example, b.example]
            routes: [{path: /, respond: 204}]
          - listen: ":81"
            server_names: [a.example]
            routes: [{path: /, respond: 204}]
          - listen: [":81", ":80"]
            server_names: [c.example, B.Example]
            routes: [{path: /, respond: 204}]
    """) == ("F:9:31: sites[2].server_names[1]: server name 'b.example' on 0.0.0.0:80 "
             "is already used by sites[0] (line 3)")


def test_conflicting_backlogs(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80 backlog=100"
            routes: [{path: /, respond: 204}]
          - listen: ":80 backlog=200"
            routes: [{path: /, respond: 204}]
    """) == ("F:4:13: sites[1].listen: backlog=200 conflicts with backlog=100 for "
             "0.0.0.0:80 at line 2 (one socket, one backlog)")


@pytest.mark.parametrize("name, expected", [
    ("a*.example.com", "'a*.example.com': a wildcard must be the whole first label, as in *.example.com"),
    ("*", "'*': a wildcard must be the whole first label, as in *.example.com"),
    ("www.*", "'www.*': a wildcard must be the whole first label, as in *.example.com"),
    (".example.com", "'.example.com' (nginx's shorthand) is not supported: list "
                     "'example.com' and '*.example.com'"),
    ("~^www\\d+$", "regular-expression server names are not supported; use exact "
                   "names or *.suffix wildcards"),
    ("example.com:8080", "'example.com:8080' is not a host name (a server name has no "
                         "port or path: the port belongs to listen)"),
    ("exa mple.com", "'exa mple.com' is not a valid host name (labels of letters, digits "
                     "and inner hyphens, 1 to 63 long)"),
    ("-bad.example", "'-bad.example' is not a valid host name (labels of letters, digits "
                     "and inner hyphens, 1 to 63 long)"),
    ("a..b", "'a..b' is not a valid host name (labels of letters, digits and inner "
             "hyphens, 1 to 63 long)"),
    ("bücher.de", "'bücher.de' is not ASCII: write an internationalised name in its "
                  "xn-- (punycode) form"),
    ("", "a server name must not be empty"),
])
def test_server_name_problems(tmp_path, name, expected):
    text = (f"sites:\n  - listen: 80\n    server_names: ['{name}']\n"
            "    routes: [{path: /, respond: 204}]\n")
    assert one_problem(tmp_path, text) == f"F:3:20: sites[0].server_names[0]: {expected}"


def test_server_names_types_and_repeats(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: 80
            server_names: [a.example, 42, A.EXAMPLE.]
            routes: [{path: /, respond: 204}]
    """) == [
        "F:3:31: sites[0].server_names[1]: expected a host name, got an integer 42",
        "F:3:35: sites[0].server_names[2]: server name 'a.example' is already listed in "
        "this site (line 3)",
    ]


# --------------------------------------------------------------------------
# Routes

def route_problem(tmp_path, route):
    """The one problem of a site whose only route is `route` (flow YAML)."""
    text = f"sites:\n  - listen: 80\n    routes:\n      - {route}\n"
    return one_problem(tmp_path, text)


@pytest.mark.parametrize("route, expected", [
    ("{respond: 204}", "F:4:9: sites[0].routes[0].path: required key is missing"),
    ("{path: /}", "F:4:9: sites[0].routes[0]: a route needs a handler: one of respond, static, "
     "proxy, fastcgi, app"),
    ("{path: /, respond: 204, static: {root: /srv}}",
     "F:4:33: sites[0].routes[0].static: a route takes exactly one handler, found "
     "'respond' and 'static'"),
    ("{path: /, fastcgi: {connect: '127.0.0.1:9000'}}",
     "F:4:28: sites[0].routes[0].fastcgi.root: required key is missing"),
    ("{path: /, proxy: {upstream: api}}",
     "F:4:37: sites[0].routes[0].proxy.upstream: unknown upstream 'api': no "
     "upstreams are defined (add it under the top-level key upstreams)"),
    ("{path: /, fastcgi: {root: /tmp}}",
     "F:4:28: sites[0].routes[0].fastcgi: expected the key upstream (a group's name) or "
     "connect (such as 127.0.0.1:9000 or unix:/run/php/php8.2-fpm.sock)"),
    ("{path: /, fastcgi: {connect: 'http://x:9', root: /tmp}}",
     "F:4:38: sites[0].routes[0].fastcgi.connect: expected an address such as 127.0.0.1:9000 "
     "or unix:/run/php/php8.2-fpm.sock, not a URL ('http://x:9')"),
    ("{path: /, fastcgi: {connect: 'unix:/run/x.sock', root: /tmp, split_path_info: '(.*)'}}",
     "F:4:87: sites[0].routes[0].fastcgi.split_path_info: expected two groups, the script "
     "name and PATH_INFO, such as '^(.+\\.php)(/.*)$'"),
    ("{path: /, fastcgi: {connect: 'unix:/run/x.sock', root: /tmp, params: {REQUEST_URI: x}}}",
     "F:4:79: sites[0].routes[0].fastcgi.params.REQUEST_URI: REQUEST_URI is computed for each "
     "request and cannot be fixed for a route"),
    ("{path: /, app: shop}",
     "F:4:24: sites[0].routes[0].app: unknown app 'shop': no apps are defined (add it "
     "under the top-level key apps)"),
    ("{path: /, cache: {}}",
     "F:4:19: sites[0].routes[0].cache: 'cache' is not a handler: it goes inside a proxy "
     "or fastcgi route, as proxy: {upstream: NAME, cache: {zone: NAME}}"),
    ("{path: /, respond: 204, cache: {zone: z}}",
     "F:4:33: sites[0].routes[0].cache: 'cache' is not a handler: it goes inside a proxy "
     "or fastcgi route, as proxy: {upstream: NAME, cache: {zone: NAME}}"),
    ("{path: /, repsond: 204}",
     "F:4:19: sites[0].routes[0].repsond: unknown key 'repsond'; did you mean 'respond'?"),
    ("{path: api/, respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got 'api/'"),
    ("{path: '= exact', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got 'exact'"),
    ("{path: '^/api', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got '^/api'; "
     "for a regular expression write '~ ^/api'"),
    ("{path: '@fallback', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got '@fallback'; "
     "named locations (@name) are not supported"),
    ("{path: '~ ', respond: 204}",
     "F:4:16: sites[0].routes[0].path: expected a regular expression after '~'"),
    ("{path: '~ (unclosed', respond: 204}",
     "F:4:16: sites[0].routes[0].path: invalid regular expression: Unmatched ( or \\("),
    ("{path: '~* [z-a]', respond: 204}",
     "F:4:16: sites[0].routes[0].path: invalid regular expression: Invalid range end"),
    ("{path: '~ ^/(?i)api', respond: 204}",
     "F:4:16: sites[0].routes[0].path: '(?' is PCRE syntax; routes use POSIX extended "
     "regular expressions (no (?i), (?:...) or lookarounds; use ~* for case-insensitive "
     "matching)"),
    ("{path: '~ ^/v\\d+/', respond: 204}",
     "F:4:16: sites[0].routes[0].path: '\\d' is PCRE syntax, not POSIX; write [0-9]"),
    ("{path: \"/a\\tb\", respond: 204}",
     "F:4:16: sites[0].routes[0].path: must not contain control characters"),
    ("{path: 5, respond: 204}",
     "F:4:16: sites[0].routes[0].path: expected a string, got an integer 5"),
    ("[/, 204]", "F:4:9: sites[0].routes[0]: expected a mapping, got a list"),
])
def test_route_problems(tmp_path, route, expected):
    assert route_problem(tmp_path, route) == expected


def test_escaped_backslash_d_is_a_literal(tmp_path):
    # "\\d" in the regex is a backslash then "d": not the PCRE class.
    cfg = load(tmp_path, "sites:\n  - listen: 80\n    routes:\n"
                         "      - {path: '~ a\\\\d', respond: 204}\n")
    assert cfg.sites[0].routes[0].pattern == "a\\\\d"


def test_duplicate_routes(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /a, respond: 204}
              - {path: "= /a", respond: 204}
              - {path: "^~ /a", respond: 204}
              - {path: "= /a", respond: 204}
              - {path: "~ x", respond: 204}
              - {path: "~* x", respond: 204}
              - {path: "~ x", respond: 204}
          - listen: 81
            routes:
              - {path: /a, respond: 204}
    """) == [
        "F:6:16: sites[0].routes[2].path: duplicate route for '/a' (first at line 4); "
        "only the first could ever match",
        "F:7:16: sites[0].routes[3].path: duplicate route for '/a' (first at line 5); "
        "only the first could ever match",
        "F:10:16: sites[0].routes[6].path: duplicate route for 'x' (first at line 8); "
        "only the first could ever match",
    ]


# --------------------------------------------------------------------------
# respond

@pytest.mark.parametrize("respond, expected", [
    ("99", "F:4:28: sites[0].routes[0].respond: status 99 is out of range (200..599)"),
    ("600", "F:4:28: sites[0].routes[0].respond: status 600 is out of range (200..599)"),
    ("101", "F:4:28: sites[0].routes[0].respond: status 101 is informational (1xx), not a "
            "final response; use 200..599"),
    ("'204'", "F:4:28: sites[0].routes[0].respond: expected a status such as 204 or a "
              "mapping with status, body, content_type, headers; got a string '204'"),
    ("null", "F:4:28: sites[0].routes[0].respond: expected a status such as 204 or a "
             "mapping with status, body, content_type, headers; got null"),
    ("{status: '200'}",
     "F:4:37: sites[0].routes[0].respond.status: expected an integer, got a string '200'"),
    ("{status: 100}",
     "F:4:37: sites[0].routes[0].respond.status: status 100 is informational (1xx), not a "
     "final response; use 200..599"),
    ("{status: 1000}",
     "F:4:37: sites[0].routes[0].respond.status: status 1000 is out of range (200..599)"),
    ("{status: 204, body: x}",
     "F:4:48: sites[0].routes[0].respond.body: a 204 response has no content: the body "
     "must be empty"),
    ("{status: 304, body: x}",
     "F:4:48: sites[0].routes[0].respond.body: a 304 response has no content: the body "
     "must be empty"),
    ("{status: 204, content_type: text/plain}",
     "F:4:56: sites[0].routes[0].respond.content_type: a 204 response has no content: "
     "remove content_type or set it to null"),
    ("{body: 42}", "F:4:35: sites[0].routes[0].respond.body: expected a string, got an integer 42"),
    ("{body: null}", "F:4:35: sites[0].routes[0].respond.body: expected a string, got null"),
    ("{content_type: ''}", "F:4:43: sites[0].routes[0].respond.content_type: must not be empty"),
    ("{content_type: \"text/html\\n\"}",
     "F:4:43: sites[0].routes[0].respond.content_type: must not contain CR or LF"),
    ("{headers: [X-A]}",
     "F:4:38: sites[0].routes[0].respond.headers: expected a mapping of header names to "
     "values, got a list"),
    ("{headers: {\"X A\": b}}",
     "F:4:39: sites[0].routes[0].respond.headers.X A: 'X A' is not a valid header name "
     "(letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("{headers: {\"X:A\": b}}",
     "F:4:39: sites[0].routes[0].respond.headers.X:A: 'X:A' is not a valid header name "
     "(letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("{headers: {X-A: \"a\\r\\nSet-Cookie: x\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain CR or LF"),
    ("{headers: {X-A: \"a\\0b\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain NUL"),
    ("{headers: {X-A: \"a\\x1bb\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain the control "
     "character 0x1b"),
    ("{headers: {X-A: \" padded\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not start or end with whitespace"),
    ("{headers: {X-A: null}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: expected a string, got null"),
    ("{headers: {X-A: []}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: expected at least one value"),
    ("{headers: {X-A: [ok, {}]}}",
     "F:4:49: sites[0].routes[0].respond.headers.X-A[1]: expected a string, got a mapping"),
    ("{headers: {X-A: a, x-a: b}}",
     "F:4:47: sites[0].routes[0].respond.headers.x-a: header 'x-a' is already set as 'X-A' "
     "(names are case-insensitive); give one name a list of values to send it more than once"),
])
def test_respond_problems(tmp_path, respond, expected):
    assert route_problem(tmp_path, f"{{path: /, respond: {respond}}}") == expected


def test_problem_stays_on_one_line(tmp_path):
    lines = problems(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /, respond: {headers: {"X\\nA": b}, status: "2\\r"}}
    """)
    assert lines == [
        "F:4:39: sites[0].routes[0].respond.headers.X\\nA: 'X\\nA' is not a valid header name "
        "(letters, digits and !#$%&'*+-.^_`|~ only)",
        "F:4:59: sites[0].routes[0].respond.status: expected an integer, got a string '2\\r'",
    ]


@pytest.mark.parametrize("name, advice", [
    ("Content-Length", "the server computes it from body"),
    ("transfer-encoding", "the server chooses the framing"),
    ("Connection", "the server manages connections (see limits.keepalive_*)"),
    ("Keep-Alive", "the server manages connections (see limits.keepalive_*)"),
    ("Date", "the server sends the current date"),
    ("Server", "use the top-level key server_header instead"),
    ("Content-Type", "use the key content_type instead"),
])
def test_respond_refuses_server_owned_headers(tmp_path, name, advice):
    assert route_problem(tmp_path, f"{{path: /, respond: {{headers: {{{name}: x}}}}}}") == (
        f"F:4:39: sites[0].routes[0].respond.headers.{name}: header '{name}' is set by "
        f"the server: {advice}")
