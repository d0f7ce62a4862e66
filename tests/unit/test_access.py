"""Roles from the mapping, the server-side check, the exposure guard and the OIDC secrets
(docs/security.md)."""

import os
import tomllib

import pytest

from outbox_monitor.access import Identity, Role, local_identity, require, role_for
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import AccessDenied, ConfigError
from outbox_monitor.service.serve import check_exposure, oidc_secrets


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_"):
            monkeypatch.delenv(name)


def mapping(**entries: str):
    return load_settings(**entries)


def test_the_highest_matching_role_wins():
    settings = mapping(
        admins="root@example.com",
        operators="@sre.example.com, groups=oncall",
        viewers="@example.com,*@contractor.io",
    )
    cases = {
        ("root@example.com", ()): Role.admin,
        ("Ann@SRE.example.com", ()): Role.operator,
        ("bob@example.com", ("oncall",)): Role.operator,
        ("bob@example.com", ("staff",)): Role.viewer,
        ("eve@contractor.io", ()): Role.viewer,
        ("eve@evil.com", ("staff",)): None,
        ("bob@notexample.com", ()): None,  # a domain matches after the @ only
    }
    for (email, groups), expected in cases.items():
        assert role_for(settings, email, {"groups": list(groups)}) is expected, email


def test_a_claim_match_reads_strings_and_lists_and_nothing_else():
    settings = mapping(operators="groups=oncall,tier=gold")
    assert role_for(settings, None, {"groups": "oncall"}) is Role.operator
    assert role_for(settings, None, {"tier": ["silver", "gold"]}) is Role.operator
    assert role_for(settings, None, {"groups": ["oncall-light"]}) is None
    assert role_for(settings, None, {}) is None


def test_no_mapping_means_no_access_for_signed_in_people():
    assert role_for(mapping(), "alice@example.com", {"groups": ["admins"]}) is None


def test_a_malformed_entry_names_the_variable(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_OPERATORS", "alice@example.com, bob")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "OUTBOX_MONITOR_OPERATORS: 'bob' is not an e-mail" in str(error.value)


def test_require_refuses_a_lower_role_and_says_which_is_needed():
    viewer = Identity("vic@example.com", Role.viewer, "oidc")
    require(Identity("op@example.com", Role.operator, "oidc"), Role.operator, "replay rows")
    with pytest.raises(AccessDenied) as error:
        require(viewer, Role.operator, "replay rows")
    assert str(error.value).startswith(
        "vic@example.com (viewer) may not replay rows: it needs the operator role"
    )
    assert "OUTBOX_MONITOR_OPERATORS" in error.value.hint


def test_the_local_user_is_an_admin_named_by_the_setting_or_the_option():
    settings = load_settings(actor="carol")
    assert local_identity(settings) == Identity("carol", Role.admin, "local")
    assert local_identity(settings, name="dave", source="cli").name == "dave"


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "localhost"])
def test_loopback_needs_no_sign_in(address):
    assert check_exposure(load_settings(), address, insecure_no_auth=False) == []


def test_a_non_loopback_address_without_sign_in_is_refused():
    with pytest.raises(ConfigError) as error:
        check_exposure(load_settings(), "0.0.0.0", insecure_no_auth=False)
    assert "refusing to serve the dashboard on 0.0.0.0 without sign-in" in str(error.value)
    assert "--insecure-no-auth" in error.value.hint


def test_insecure_no_auth_serves_with_a_warning():
    [warning] = check_exposure(load_settings(actor="ops"), "0.0.0.0", insecure_no_auth=True)
    assert warning.startswith("WARNING: the dashboard listens on 0.0.0.0 WITHOUT sign-in")
    assert "as ops" in warning
    by_setting = load_settings(insecure_no_auth="true")
    assert len(check_exposure(by_setting, "10.0.0.5", insecure_no_auth=False)) == 1


def test_proxy_mode_beyond_loopback_needs_trusted_proxies():
    """Issue 29 item 4: with OUTBOX_MONITOR_TRUSTED_PROXIES empty the header is believed
    from loopback only, so proxy mode on another address refuses to start, naming it."""
    settings = load_settings(auth="proxy", viewers="@example.com")
    assert check_exposure(settings, "127.0.0.1", insecure_no_auth=False) == []
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_TRUSTED_PROXIES empty") as refused:
        check_exposure(settings, "0.0.0.0", insecure_no_auth=False)
    assert "Set OUTBOX_MONITOR_TRUSTED_PROXIES" in refused.value.hint
    listed = load_settings(auth="proxy", viewers="@example.com", trusted_proxies="10.0.0.0/8")
    assert check_exposure(listed, "0.0.0.0", insecure_no_auth=False) == []


@pytest.mark.parametrize("networks", ["0.0.0.0/0", "10.0.0.0/8, ::/0", "128.0.0.0/1"])
def test_trusted_proxies_wider_than_a_private_range_are_refused_naming_the_setting(
    networks, monkeypatch
):
    """A hostile pass of issue 29: 0.0.0.0/0 believed an identity header from anyone."""
    monkeypatch.setenv("OUTBOX_MONITOR_TRUSTED_PROXIES", networks)
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_TRUSTED_PROXIES") as refused:
        load_settings(auth="proxy", viewers="@example.com")
    monkeypatch.delenv("OUTBOX_MONITOR_TRUSTED_PROXIES")
    assert "addresses: anyone who reaches the dashboard" in str(refused.value)
    kept = load_settings(trusted_proxies="10.0.0.0/8, fc00::/7, 192.168.1.7")
    assert kept.trusted_proxies == ("10.0.0.0/8", "fc00::/7", "192.168.1.7/32")


def test_a_sign_in_mode_with_no_one_mapped_warns():
    [warning] = check_exposure(load_settings(**OIDC), "0.0.0.0", insecure_no_auth=False)
    assert warning.startswith("WARNING: oidc sign-in with no one mapped to a role")
    mapped = load_settings(**OIDC, operators="groups=oncall")
    assert check_exposure(mapped, "0.0.0.0", insecure_no_auth=False) == []


def test_oidc_mode_without_its_settings_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.streamlit/secrets.toml
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_AUTH=oidc, but no OIDC settings"):
        check_exposure(load_settings(auth="oidc"), "127.0.0.1", insecure_no_auth=False)
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text('[auth]\nclient_id = "x"\n')
    settings = load_settings(auth="oidc", viewers="@example.com")
    assert check_exposure(settings, "127.0.0.1", insecure_no_auth=False) == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("oidc_metadata_url", "notaurl", "expected an http(s) URL, got 'notaurl'"),
        ("oidc_redirect_url", "https://x.example/callback", "/oauth2callback"),
        ("oidc_cookie_secret", "short", "at least 32 random characters"),
        ("oidc_client_secret", " ", "empty"),
    ],
)
def test_bad_oidc_settings_name_the_variable(monkeypatch, name, value, message):
    for key, given in {**OIDC, name: value}.items():
        monkeypatch.setenv(f"OUTBOX_MONITOR_{key.upper()}", given)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert f"OUTBOX_MONITOR_{name.upper()}: " in str(error.value)
    assert message in str(error.value)


@pytest.mark.parametrize("entry", ["@", "a@b.com;c@d.com", "a b@c.com", "groups=", "bob"])
def test_odd_role_entries_are_refused(monkeypatch, entry):
    monkeypatch.setenv("OUTBOX_MONITOR_OPERATORS", entry)
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_OPERATORS: "):
        load_settings()


OIDC = {
    "auth": "oidc",
    "oidc_metadata_url": "http://127.0.0.1:9000/.well-known/openid-configuration",
    "oidc_client_id": "outbox-monitor",
    "oidc_client_secret": 'se"cret\\x',
    "oidc_cookie_secret": "c" * 40,
    "oidc_redirect_url": "http://127.0.0.1:8501/oauth2callback",
}


def test_oidc_settings_become_streamlit_auth_secrets():
    secrets = tomllib.loads(oidc_secrets(load_settings(**OIDC)))

    assert secrets == {
        "auth": {
            "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
            "cookie_secret": "c" * 40,
            "client_id": "outbox-monitor",
            "client_secret": 'se"cret\\x',
            "server_metadata_url": "http://127.0.0.1:9000/.well-known/openid-configuration",
            "client_kwargs": {"prompt": "login"},
        }
    }
    assert oidc_secrets(load_settings()) is None


def test_oidc_settings_are_all_or_none_and_secrets_stay_out_of_repr():
    partial = {k: v for k, v in OIDC.items() if k != "oidc_cookie_secret"}
    with pytest.raises(ConfigError) as error:
        load_settings(**partial)
    assert "missing OUTBOX_MONITOR_OIDC_COOKIE_SECRET" in str(error.value)
    settings = load_settings(**OIDC, dsn="postgresql://u:hunter2@h/d")
    for text in (repr(settings), str(settings)):
        assert "hunter2" not in text and 'se"cret' not in text and "c" * 40 not in text
    assert 'se"cret' not in settings.model_dump_json()
