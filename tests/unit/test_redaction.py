"""The Redactor without a database: key globs, card and e-mail detectors, regexes, JSON
values and JSON text (whole, cut, invalid, deep, odd), free text, settings validation."""

import copy
import json
import random
import time
from collections.abc import Mapping
from typing import Any

import pytest

from outbox_monitor.config.settings import DEFAULT_REDACT_KEYS, load_settings
from outbox_monitor.errors import ConfigError
from outbox_monitor.privacy.redaction import Redactor, redactor_for
from outbox_monitor.privacy.value_detectors import REDACTED, check_value_detector, redact_cards


def luhn_valid(digits: str) -> bool:
    """Whether a string of ASCII digits passes the Luhn check (card numbers do)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if index % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def redact_value(redactor: Redactor, value: Any) -> Any:
    """The oracle of ``Redactor.redact_json_text`` (which redacts JSON text as it streams):
    redact a parsed JSON value; returns a copy, the argument is left unchanged.

    Args:
        value: what ``json.loads`` returns (dicts, lists, strings, numbers, booleans,
            ``None``), at any depth (no recursion); tuples are copied as lists.

    Returns:
        A copy in which the value of every key matching a glob is ``"[redacted]"``
        (whatever its type), and every other string — keys included — went through
        ``redact_text``. A key that becomes equal to another one after redaction gets
        `` (2)``, `` (3)``… so no entry disappears from the view.
    """
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, holder, 0)]
    while stack:
        source, target, slot = stack.pop()
        if isinstance(source, Mapping):
            copied: dict[Any, Any] = {}
            target[slot] = copied
            for key, item in source.items():
                shown = redactor.redact_text(key) if isinstance(key, str) else key
                if shown in copied:
                    number = 2
                    while f"{shown} ({number})" in copied:
                        number += 1
                    shown = f"{shown} ({number})"
                if redactor.matches_key(str(key)):
                    copied[shown] = REDACTED
                else:
                    copied[shown] = None
                    stack.append((item, copied, shown))
        elif isinstance(source, list | tuple):
            items: list[Any] = [None] * len(source)
            target[slot] = items
            stack.extend((item, items, index) for index, item in enumerate(source))
        elif isinstance(source, str):
            target[slot] = redactor.redact_text(source)
        else:
            target[slot] = source
    return holder[0]


R = REDACTED
PAYLOAD = {
    "customer": {"Email": "a@b.co", "cards": [{"card_number": "4111 1111 1111 1111"}]},
    "note": "paid with 4111-1111-1111-1111",
    "items": [{"sku": "x", "token": "t"}],
}
RAW_VALUES = ("a@b.co", "4111 1111 1111 1111", "4111-1111-1111-1111", '"t"')
# the shipped defaults: "cards" matches card*, so the whole array goes
DEFAULT_EXPECTED = {
    "customer": {"Email": R, "cards": R},
    "note": f"paid with {R}",
    "items": [{"sku": "x", "token": R}],
}
# keys named one by one: the array stays and the key inside its objects goes
NARROW_KEYS = ("*EMAIL*", "card_number", "*token*")
NARROW_EXPECTED = {
    "customer": {"Email": R, "cards": [{"card_number": R}]},
    "note": f"paid with {R}",
    "items": [{"sku": "x", "token": R}],
}


@pytest.fixture
def default() -> Redactor:
    return Redactor(DEFAULT_REDACT_KEYS, ["card"])


@pytest.fixture
def narrow() -> Redactor:
    return Redactor(NARROW_KEYS, ["card", "email"])


# ---------------------------------------------------------------------------- the payload


def test_nested_keys_and_arrays_with_the_defaults(default):
    original = copy.deepcopy(PAYLOAD)

    assert redact_value(default, PAYLOAD) == DEFAULT_EXPECTED
    assert original == PAYLOAD  # a copy; the argument is untouched
    for indent in (None, 4):
        text = default.redact_json_text(json.dumps(PAYLOAD, indent=indent))
        assert json.loads(text) == DEFAULT_EXPECTED
        assert not any(raw in text for raw in RAW_VALUES)


def test_keys_inside_arrays_of_objects_are_matched_case_insensitively(narrow):
    assert redact_value(narrow, PAYLOAD) == NARROW_EXPECTED
    text = narrow.redact_json_text(json.dumps(PAYLOAD))
    assert text == json.dumps(NARROW_EXPECTED)


def test_json_text_keeps_layout_numbers_and_escapes(default):
    text = '{\n  "amount": 1.10,\n  "big": 123456789012345678901234567890,\n  "tiny": 1e-400,\n'
    text += '  "caf\\u00e9": "cr\\u00e8me",  "password" :{"a": [1, {"b": "}"}]}, "z": null}'

    shown = default.redact_json_text(text)

    assert shown == text.replace('{"a": [1, {"b": "}"}]}', f'"{R}"')


def test_a_matching_key_hides_any_type_of_value():
    redactor = Redactor(["secret*"], [])
    value = {
        "secret_n": 42,
        "secret_obj": {"x": [1, 2]},
        "secret_list": [{"a": 1}],
        "secret_null": None,
        "secret_bool": False,
        "kept": {"secret_deep": "s", "other": "o"},
    }
    expected = {
        "secret_n": R,
        "secret_obj": R,
        "secret_list": R,
        "secret_null": R,
        "secret_bool": R,
        "kept": {"secret_deep": R, "other": "o"},
    }

    assert redact_value(redactor, value) == expected
    assert json.loads(redactor.redact_json_text(json.dumps(value))) == expected


def test_globs():
    redactor = Redactor(["*email*", "card*", "authorization", "x?z", "[ab]id"], [])

    assert redactor.matches_key("customer_EMAIL_address")
    assert redactor.matches_key("Cards") and redactor.matches_key("card")
    assert not redactor.matches_key("discard")  # card* anchors at the start
    assert redactor.matches_key("Authorization")
    assert not redactor.matches_key("authorization_id")
    assert redactor.matches_key("xyz") and not redactor.matches_key("xz")
    assert redactor.matches_key("Bid") and not redactor.matches_key("cid")


# ---------------------------------------------------------------------------- detectors


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111111",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4111 - 1111 - 1111 - 1111",
        "378282246310005",  # Amex, 15 digits in one run
        "3782 822463 10005",  # Amex grouping
        "4222222222222",  # 13 digits
        "4000000000000000006",  # 19 digits
    ],
)
def test_card_numbers_are_found(text):
    assert luhn_valid(text.replace(" ", "").replace("-", ""))
    assert redact_cards(f"paid with {text}.") == f"paid with {R}."


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",  # Luhn fails
        "4111 1111 1111 1112",
        "411111111117",  # Luhn-valid but 12 digits
        "41111111111111111115",  # Luhn-valid but 20 digits
        "99994111111111111111111",  # a card inside a longer digit run is not cut out
        "4111+1111+1111+1111",  # not a separator
        "4111    1111 1111 1111",  # four spaces split it into short runs
        "order 1234567, retry 3",
    ],
)
def test_luhn_negatives_stay(text):
    assert redact_cards(text) == text


def test_a_card_next_to_other_numbers_is_still_found():
    assert redact_cards("2024-01-15 4111111111111111 x") == f"2024-01-15 {R} x"
    assert redact_cards("12 4111 1111 1111 1111 99") == f"12 {R} 99"
    assert redact_cards("a4111111111111111b") == f"a{R}b"
    assert redact_cards("4111111111111111,5555555555554444") == f"{R},{R}"


def test_email_and_regex_detectors():
    redactor = Redactor([], ["email", r"\bIBAN [A-Z]{2}\d+", "(?i)secret-\\w+"])

    text = "to Ünïcode.Person+tag@exämple.co.uk and x@y.io; IBAN DE44500105175407324931, SECRET-abc"
    assert redactor.redact_text(text) == f"to {R} and {R}; {R}, {R}"
    assert redactor.redact_text("no at-sign here, a@b, @home") == "no at-sign here, a@b, @home"


def test_url_encoded_addresses_are_found_and_a_trailing_colon_is_kept():
    detector = Redactor([], ["email"])
    keyed = Redactor(DEFAULT_REDACT_KEYS, ["email"])

    for redactor in (detector, keyed):
        assert redactor.redact_text("GET /users?mail=frank%40example.com&page=2 failed") == (
            f"GET /users?mail={R}&page=2 failed"
        )
        assert redactor.redact_text("no FRANK%40Example.COM.") == f"no {R}."
        assert redactor.redact_text("email=gina@example.com: bounced") == (f"email={R}: bounced")
        assert redactor.redact_text("email=gina@example.com:") == f"email={R}:"
    assert detector.redact_text("50%40 off, 100%40") == "50%40 off, 100%40"
    assert keyed.redact_text("token=a:b: expired") == f"token={R}: expired"


@pytest.mark.parametrize(
    "key",
    [
        "auth",
        "Authorization",
        "X-Auth-Token",
        "oauth",
        "api_key",
        "apikey",
        "x-api-key",
        "apiKey",
        "credentials",
        "aws_credential",
    ],
)
def test_the_default_globs_hide_credentials_keys(key):
    redactor = Redactor(DEFAULT_REDACT_KEYS, [])

    assert redactor.matches_key(key)
    assert redact_value(redactor, {key: "k1", "sku": "x"}) == {key: R, "sku": "x"}
    assert redactor.redact_text(f"{key}=k1 sku=x") == f"{key}={R} sku=x"


def test_detector_entries_are_checked():
    assert check_value_detector("CARD")("4111111111111111") == R
    assert check_value_detector(" email ")("a@b.co") == R
    with pytest.raises(ValueError, match=r"'\(unclosed' is not a regular expression"):
        check_value_detector("(unclosed")
    with pytest.raises(ValueError, match=r"'a\*' matches the empty text"):
        check_value_detector("a*")


def test_settings_name_the_variable_and_the_bad_entry(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_REDACT_VALUES", "card, [z-a]")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert "OUTBOX_MONITOR_REDACT_VALUES: '[z-a]' is not a regular expression" in str(raised.value)

    monkeypatch.setenv("OUTBOX_MONITOR_REDACT_VALUES", "email, x\\d+")
    monkeypatch.setenv("OUTBOX_MONITOR_REDACT_KEYS", "*pan*")
    redactor = redactor_for(load_settings())
    assert redact_value(redactor, {"PAN": 4, "n": "a@b.co x12"}) == {"PAN": R, "n": f"{R} {R}"}


def test_nothing_configured_changes_nothing(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_REDACT_KEYS", "off")
    monkeypatch.setenv("OUTBOX_MONITOR_REDACT_VALUES", "")
    redactor = redactor_for(load_settings())
    text = json.dumps(PAYLOAD)

    assert not redactor.enabled
    assert redactor.redact_json_text(text) == text
    assert redact_value(redactor, PAYLOAD) == PAYLOAD
    assert redactor.redact_text("token=x a@b.co") == "token=x a@b.co"


# ---------------------------------------------------------------------------- odd payloads


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("paid by a@b.co", f"paid by {R}"),
        (["a@b.co", 4111111111111111, {"token": 1}], [R, 4111111111111111, {"token": R}]),
        (12.5, 12.5),
        (None, None),
        (True, True),
        ("", ""),
        ({}, {}),
        ([], []),
    ],
)
def test_non_object_payloads(narrow, value, expected):
    assert redact_value(narrow, value) == expected
    assert json.loads(narrow.redact_json_text(json.dumps(value))) == expected


def test_deep_nesting_never_recurses(narrow):
    depth = 100_000
    value: object = {"token": "t", "n": "a@b.co"}
    for _ in range(depth):
        value = [{"k": value}]

    shown = redact_value(narrow, value)
    for _ in range(depth):
        shown = shown[0]["k"]
    assert shown == {"token": R, "n": R}

    text = '[{"k": ' * depth + '{"token": "t", "n": "a@b.co"}' + "}]" * depth
    assert narrow.redact_json_text(text) == text.replace('"t"', f'"{R}"').replace("a@b.co", R)
    hidden = '{"token": ' + "[" * depth + "]" * depth + ', "x": 1}'
    assert narrow.redact_json_text(hidden) == f'{{"token": "{R}", "x": 1}}'


def test_unicode_keys_and_values(narrow):
    value = {"名前": "☃ naïve", "Kunden_EMail": "x", "emoji": "🙂 a@b.co"}
    expected = {"名前": "☃ naïve", "Kunden_EMail": R, "emoji": f"🙂 {R}"}

    assert redact_value(narrow, value) == expected
    assert json.loads(narrow.redact_json_text(json.dumps(value))) == expected
    assert json.loads(narrow.redact_json_text(json.dumps(value, ensure_ascii=False))) == expected


def test_a_cut_head_is_redacted_up_to_its_end(narrow):
    text = json.dumps({"sku": "x", "note": "mail a@b.co", "token": "t" * 1000, "tail": 1})
    for cut in range(1, len(text)):
        shown = narrow.redact_json_text(text[:cut])
        assert "a@b.co" not in shown
        assert "tt" not in shown  # the token's value, even cut, never shows

    cut_in_value = text[: text.index("t" * 10) + 10]
    before = text[: text.index('"token"')].replace("a@b.co", R)
    assert narrow.redact_json_text(cut_in_value) == f'{before}"token": "{R}"'
    cut_after_key = text[: text.index('"token"') + len('"token": ')]
    assert narrow.redact_json_text(cut_after_key) == f'{before}"token": '


def test_invalid_json_is_redacted_as_free_text(narrow):
    assert narrow.redact_json_text("not json: a@b.co token=abc") == f"not json: {R} token={R}"
    assert narrow.redact_json_text('{"a": 1} trailing a@b.co') == f'{{"a": 1}} trailing {R}'
    assert narrow.redact_json_text('{"token": abc, "x": 1}') == f'{{"token": "{R}", "x": 1}}'
    assert narrow.redact_json_text('{"a": NaN, "mail": "a@b.co"}') == (
        f'{{"a": NaN, "mail": "{R}"}}'
    )
    assert narrow.redact_json_text('["\\x", "a@b.co"]') == f'["\\x", "{R}"]'
    assert narrow.redact_json_text(None) is None


def test_strings_holding_json_or_pairs_are_redacted_too(narrow):
    value = {"body": '{"email": "a@b.co", "token": "tok_1"}', "url": "https://x/cb?token=abc&n=1"}

    assert redact_value(narrow, value) == {
        "body": f'{{"email": "{R}", "token": "{R}"}}',
        "url": f"https://x/cb?token={R}&n=1",
    }


def test_keys_that_collide_after_redaction_are_all_kept():
    redactor = Redactor([], ["email"])
    assert redact_value(redactor, {"a@b.co": 1, "c@d.co": 2, "[redacted] (2)": 3}) == {
        R: 1,
        f"{R} (2)": 2,
        f"{R} (2) (2)": 3,
    }


def random_value(rnd: random.Random, depth: int = 0) -> object:
    kind = rnd.choice("sdlnb" if depth < 5 else "snb")
    if kind == "d":
        keys = ["id", "Email", "card_no", "token", "note", "k", "é", "x y"]
        return {
            rnd.choice(keys) + str(i): random_value(rnd, depth + 1)
            for i in range(rnd.randint(0, 4))
        }
    if kind == "l":
        return [random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    if kind == "n":
        return rnd.choice([0, -3, 2.5, 10**20, 4111111111111111])
    if kind == "b":
        return rnd.choice([True, False, None])
    return rnd.choice(
        ["", "plain", "a@b.co", "4111 1111 1111 1111", 'q"uote\\', "tab\there", "☃", "token=z"]
    )


def test_json_text_and_parsed_values_agree_on_random_payloads():
    redactor = Redactor(["*email*", "card*", "token*"], ["card", "email"])
    rnd = random.Random(4)
    for _ in range(500):
        value = random_value(rnd)
        text = json.dumps(value, indent=rnd.choice([None, 2]), ensure_ascii=rnd.random() < 0.5)
        assert json.loads(redactor.redact_json_text(text)) == redact_value(redactor, value), text


# ---------------------------------------------------------------------------- free text


def test_free_text_errors(default):
    error = (
        'HTTP 400 from crm: {"email": "a@b.co", "name": "Ann", "phone": 123} '
        "url=https://crm/x?access_token=abc123&page=2 Authorization: Bearer eyJhbGci "
        "card 4111 1111 1111 1111 declined; 'password': 'hunter2', api_key => k1"
    )

    assert default.redact_text(error) == (
        f'HTTP 400 from crm: {{"email": "{R}", "name": "Ann", "phone": {R}}} '
        f"url=https://crm/x?access_token={R}&page=2 Authorization: {R} "
        f"card {R} declined; 'password': '{R}', api_key => {R}"
    )
    assert default.redact_text(None) is None
    assert default.redact_text("HTTP 500 upstream timeout after 5000 ms") == (
        "HTTP 500 upstream timeout after 5000 ms"
    )


def test_big_texts_stay_fast(default):
    started = time.perf_counter()
    default.redact_text("word " * 60_000 + "a@" * 30_000 + '"x' * 30_000)
    default.redact_json_text(json.dumps([{"sku": f"s{i}", "email": "a@b.co"} for i in range(5000)]))
    assert time.perf_counter() - started < 5
