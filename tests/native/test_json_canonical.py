"""``json_canonical``: args text that orjson writes back byte for byte (csrc/frames_check.c).

A True is a promise: the text is a JSON object and ``orjson.dumps(orjson.loads(text),
option=OPT_SORT_KEYS)`` is the text itself, so the engine may take it as the args' sorted
JSON without decoding it (the socket's plain enqueue). False only means "not known": the
caller decodes the text as before. Objects orjson writes of ints, plain strings, bools and
nulls are all recognised; the C and pure twins agree on every text."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tay._native import pure
from tests.build_guard import c_twin
from tests.storage.json_strategies import SETTINGS, json_values

c = c_twin()
MORE = settings(SETTINGS, max_examples=500)
SORTED = orjson.OPT_SORT_KEYS

# values orjson writes in the subset: ints in its range, strings without the bytes it
# escapes (control bytes, quote, backslash), bools, nulls, nested
plain_strings = st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs",),
                                      blacklist_characters='"\\'), max_size=12) \
    | st.sampled_from(["", "é", "\u2028", "\x7f", "😀", "\uffff", "x" * 300, "a/b", "'"])
subset_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
                  | st.sampled_from([0, -1, 2**63 - 1, 2**64 - 1, -(2**63), 10**18, 10**19])
                  | plain_strings)
subset_values = st.recursive(
    subset_scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(plain_strings, inner, max_size=4), max_leaves=25)
subset_objects = st.dictionaries(plain_strings, subset_values, max_size=6)
# any args a producer may send, floats, escapes and control bytes included
any_objects = st.dictionaries(st.text(max_size=5), json_values, max_size=5)


def round_trip(text: bytes) -> bytes | None:
    """What the old route makes of the text: orjson's sorted writing of its decoding."""
    try:
        return orjson.dumps(orjson.loads(text), option=SORTED)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None


def check(text: bytes) -> bool:
    """Both twins' answer, asserted equal, and the promise a True makes."""
    answer = pure.json_canonical(text)
    assert c.json_canonical(text) is answer
    assert c.json_canonical(bytearray(text)) is answer  # any buffer, not only bytes
    if answer:
        assert text[:1] == b"{" and round_trip(text) == text
    return answer


@MORE
@given(subset_objects)
@example({"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1})
def test_orjson_sorted_writing_of_the_subset_is_canonical(args):
    assert check(orjson.dumps(args, option=SORTED))


@MORE
@given(any_objects, st.booleans())
def test_any_args_the_promise_holds(args, sort):
    text = orjson.dumps(args, option=SORTED if sort else 0)
    answer = check(text)
    # in the subset exactly when there is no float and no string orjson escapes
    if sort and answer is False:
        assert text != round_trip(text) or b"\\" in text or _has_float(args)


def _has_float(value) -> bool:
    if type(value) is float:
        return True
    if type(value) is dict:
        return any(_has_float(item) for item in value.values())
    if type(value) is list:
        return any(_has_float(item) for item in value)
    return False


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    text = bytearray(orjson.dumps(draw(subset_objects | any_objects), option=SORTED))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.integers(0, 3))
        piece = draw(st.sampled_from([b" ", b"\n", b"-", b"0", b"9", b".0", b"e1", b"\\",
                                      b"\\u0041", b'"', b",", b":", b"{", b"}", b"[", b"]",
                                      b"\x00", b"\x1f", b"\x80", b"\xc3", b"\xed\xa0\x80",
                                      b"\xf4\x90\x80\x80", b"\xc0\xaf", b"true", b"nul"]))
        if how == 0:
            text[at:at] = piece
        elif how == 1 and at < len(text):
            del text[at]
        elif how == 2:
            text[at:at + len(piece)] = piece
        else:
            text = text[:at]
    return bytes(text)


@MORE
@given(mutated())
def test_mutated_texts_the_twins_agree_and_the_promise_holds(text):
    check(text)


@given(st.dictionaries(plain_strings, subset_scalars, min_size=2, max_size=6), st.data())
@settings(SETTINGS, max_examples=200)
def test_keys_out_of_order_or_repeated_are_not_canonical(args, data):
    text = orjson.dumps(args, option=SORTED)
    members = text[1:-1]
    # the members in another order (a repeated key when written twice)
    items = [orjson.dumps({key: value}, option=SORTED)[1:-1] for key, value in args.items()]
    items.sort(key=lambda item: orjson.loads(b"{" + item + b"}").popitem()[0].encode())
    assert b",".join(items) == members
    shuffled = data.draw(st.permutations(items))
    repeated = items + [data.draw(st.sampled_from(items))]
    assert check(b"{" + b",".join(shuffled) + b"}") is (shuffled == items)
    assert check(b"{" + b",".join(sorted(repeated)) + b"}") is False


NEAR_MISSES = [
    b"", b"{", b"}", b"[]", b"1", b'"a"', b"null", b"{}", b'{"a":1}', b'{"a":1,}', b'{,}',
    b'{"a"}', b'{"a":}', b'{"a" :1}', b'{"a": 1}', b'{"a":1 }', b' {"a":1}', b'{"a":1}\n',
    b'{"a":-0}', b'{"a":0}', b'{"a":-1}', b'{"a":01}', b'{"a":-01}', b'{"a":1.0}',
    b'{"a":1e2}', b'{"a":1E2}', b'{"a":-}', b'{"a":+1}',
    b'{"a":18446744073709551615}', b'{"a":18446744073709551616}',
    b'{"a":99999999999999999999}', b'{"a":100000000000000000000}',
    b'{"a":-9223372036854775808}', b'{"a":-9223372036854775809}',
    b'{"a":-10000000000000000000}', b'{"a":9223372036854775808}',
    b'{"a":"\\n"}', b'{"a":"\\u00e9"}', b'{"a":"\\/"}', b'{"a":"\x7f"}', b'{"a":"\t"}',
    b'{"a":"\xc3\xa9"}', b'{"\xc3\xa9":1,"z":2}', b'{"z":1,"\xc3\xa9":2}',
    b'{"a":"\xed\x9f\xbf"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\xee\x80\x80"}',
    b'{"a":"\xf0\x90\x80\x80"}', b'{"a":"\xf0\x8f\xbf\xbf"}', b'{"a":"\xf4\x8f\xbf\xbf"}',
    b'{"a":"\xf4\x90\x80\x80"}', b'{"a":"\xe0\xa0\x80"}', b'{"a":"\xe0\x9f\xbf"}',
    b'{"a":"\xc1\xbf"}', b'{"a":"\xc2\x80"}', b'{"a":"\xc3"}', b'{"a":"\xff"}',
    b'{"a":tru}', b'{"a":true}', b'{"a":truex}', b'{"a":nulls}', b'{"a":false}',
    b'{"a":[1,2,[]]}', b'{"a":[1,]}', b'{"a":[,1]}', b'{"a":[1}', b'{"a":{"b":1]}',
    b'{"":1}', b'{"":1,"":2}', b'{"a":1,"a":2}', b'{"a":1,"ab":2}', b'{"ab":1,"a":2}',
    b'{"a":{"b":1,"c":2},"b":{"b":1,"a":2}}', b'{"a":"' + b"x" * 9 + b'"}',
    b'{"a":"x\\"}', b'{"a":"' + b"y" * 1024 + b'","b":1}', b'{"a":1}{}', b'{"a":1}}',
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses(text):
    assert check(text) is (round_trip(text) == text and text[:1] == b"{"
                           and b"\\" not in text and b".0" not in text)


def test_nesting_past_the_depth_is_not_known():
    for depth, answer in ((127, True), (128, True), (129, False), (300, False)):
        text = b'{"a":' * depth + b"1" + b"}" * depth
        assert check(text) is answer
        mixed = b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
        assert check(mixed) is answer


def test_every_byte_inside_a_string():
    for byte in range(256):
        text = b'{"a":"x' + bytes([byte]) + b'yzzzzzzzzzzzzzzzz"}'
        assert check(text) is (0x20 <= byte < 0x80 and byte not in b'"\\')
        # and at each place of an 8-byte word
        for at in range(9):
            text = b'{"a":"' + b"z" * at + bytes([byte]) + b"z" * 16 + b'"}'
            assert check(text) is (0x20 <= byte < 0x80 and byte not in b'"\\')


def test_every_kind_of_byte_at_every_place_of_a_block_and_before_the_end():
    # the string scan goes sixteen bytes, then eight, then one at a time (json_plain_run):
    # a byte that stops or spoils a string (quote, backslash, control, DEL, bad or good
    # UTF-8) at every place of strings 0..40 bytes long, as a value and as a key, the
    # closing quote that many bytes before the end of the text
    pieces = [b'"', b"\\", b"\x00", b"\x1f", b"\x7f", b"\x80", b"\xff", b"\xc3", b"\xc3\xa9",
              b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"z"]
    for length in range(41):
        for at in range(length + 1):
            for piece in pieces:
                body = b"y" * at + piece + b"y" * (length - at)
                for text in (b'{"a":"' + body + b'"}', b'{"' + body + b'":1}',
                             b'{"a":"' + body + b'","b":1,"c":"yyyyyyyyyyyyyyyy"}'):
                    plain = piece in (b"z", b"\x7f", b"\xc3\xa9", b"\xf0\x9f\x98\x80")
                    assert check(text) is plain, text
