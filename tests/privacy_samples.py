"""The payload, error and identities the privacy tests share (docs/security.md): nested
keys and arrays, a card number in text, an e-mail, tokens."""

from outbox_monitor.privacy.value_detectors import REDACTED as R

PAYLOAD = {
    "customer": {"Email": "a@b.co", "cards": [{"card_number": "4111 1111 1111 1111"}]},
    "note": "paid with 4111-1111-1111-1111",
    "items": [{"sku": "x", "token": "t"}],
}
EXPECTED = {  # with the shipped defaults: "cards" matches card*
    "customer": {"Email": R, "cards": R},
    "note": f"paid with {R}",
    "items": [{"sku": "x", "token": R}],
}
ERROR = 'HTTP 402 from psp: card 4111 1111 1111 1111 declined {"email": "a@b.co", "token": "tk9"}'
ERROR_SHOWN = f'HTTP 402 from psp: card {R} declined {{"email": "{R}", "token": "{R}"}}'
RAW = ("a@b.co", "4111 1111 1111 1111", "4111-1111-1111-1111", '"t"', "tk9")
