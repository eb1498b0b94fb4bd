"""Seeds of tests/fuzz/corpus/h3 (fuzz_h3.c): byte 0 picks the stream (even:
a request stream, odd: a unidirectional one), the rest is written on it.
Request streams carry HTTP/3 frames whose field sections use QPACK's
static table and literals; unidirectional ones start with a stream type.

    python3 tests/fuzz/h3_seeds.py tests/fuzz/corpus/h3
"""
import os
import sys


def varint(v):
    if v < 0x40:
        return bytes([v])
    if v < 0x4000:
        return (0x4000 | v).to_bytes(2, "big")
    return (0x80000000 | v).to_bytes(4, "big")


def frame(t, payload):
    return varint(t) + varint(len(payload)) + payload


def lit(s: bytes, prefix_bits=7, flags=0):
    assert len(s) < (1 << prefix_bits) - 1
    return bytes([flags | len(s)]) + s


def fields(method=17, path=b"/r", extra=b"", authority=b"localhost"):
    """QPACK field section: static :method (17 GET, 21 HEAD, 20 POST),
    :scheme https, :authority and :path as literals with static names."""
    out = b"\x00\x00" + bytes([0xC0 | method, 0xC0 | 23])
    out += bytes([0x50 | 0]) + lit(authority) + bytes([0x50 | 1]) + lit(path)
    return out + extra


def header(name: bytes, value: bytes):  # literal name and value (no Huffman)
    assert len(name) < 7
    return bytes([0x20 | len(name)]) + name + lit(value)


SEEDS = {
    "get_r": b"\x00" + frame(1, fields()),
    "get_big": b"\x00" + frame(1, fields(path=b"/big")),
    "get_404": b"\x00" + frame(1, fields(path=b"/nothing/here?x=1")),
    "head_r": b"\x00" + frame(1, fields(method=21)),
    "post_body": b"\x00" + frame(1, fields(method=20, extra=header(b"x-a", b"1"))) +
                 frame(0, b"hello") + frame(0, b" world"),
    "post_cl_mismatch": b"\x00" + frame(1, fields(method=20, extra=bytes([0xC0 | 4]))) +
                        frame(0, b"abc"),
    "trailers": b"\x00" + frame(1, fields(method=20)) + frame(0, b"x") +
                frame(1, b"\x00\x00" + header(b"x-t", b"v")),
    "dotdot": b"\x00" + frame(1, fields(path=b"/../../etc/passwd")),
    "no_path": b"\x00" + frame(1, b"\x00\x00" + bytes([0xC0 | 17, 0xC0 | 23])),
    "bad_qpack_index": b"\x00" + frame(1, b"\x00\x00\xff\xff\xff\x0f"),
    "dynamic_ref": b"\x00" + frame(1, b"\x02\x00\x80"),
    "settings_on_request": b"\x00" + frame(4, b""),
    "unknown_frame": b"\x00" + frame(0x21, b"grease") + frame(1, fields()),
    "huge_length": b"\x00" + varint(1) + varint(1 << 20) + b"\x00\x00",
    "data_first": b"\x00" + frame(0, b"body before headers"),
    "long_uri": b"\x00" + frame(1, fields(path=b"/" + b"a" * 100)),
    "uni_control_dup": b"\x01" + b"\x00" + frame(4, b""),
    "uni_encoder": b"\x01" + b"\x02" + b"\x3f\xe1\x1f" + b"\x43abc\x03def",
    "uni_decoder": b"\x01" + b"\x03" + b"\x80\x01",
    "uni_push": b"\x01" + b"\x01" + b"\x00",
    "uni_grease": b"\x01" + varint(0x21) + b"anything",
    "empty_request": b"\x00",
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
