"""Where a notification may go, read from a target's text: every spelling of this machine and of
private networks is refused unless THREADLINE_NOTIFY_ALLOW names it, and an email target is one
plain address."""

from __future__ import annotations

import pytest

from engine_adapter.recipes.notify_spec import ALLOW_ENV, Allowlist, email_problem, webhook_problem

NOBODY = Allowlist.from_env({})


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://127.0.0.1:5432/", "127.0.0.1 is a loopback address"),
        ("http://127.1/", "127.0.0.1 is a loopback address"),
        ("http://2130706433/", "127.0.0.1 is a loopback address"),
        ("http://0x7f.1/", "127.0.0.1 is a loopback address"),
        ("http://[::1]:5007/", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1 is a loopback address"),
        ("http://0.0.0.0/", "0.0.0.0 is a unspecified address"),
        ("http://169.254.169.254/latest/meta-data", "a link-local address"),
        ("http://[fe80::1]/", "a link-local address"),
        ("http://10.1.2.3/", "10.1.2.3 is a private address"),
        ("http://192.168.0.1/", "a private address"),
        ("http://[fd00::1]/", "a private address"),
        ("http://100.64.0.1/", "not a public address"),
        ("http://localhost:5007/", "localhost is this machine"),
        ("http://LOCALHOST./", "localhost. is this machine"),
        ("http://api.localhost/", "api.localhost is this machine"),
        ("http://hooks.example.com@127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://hooks.example.com\\@127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://hooks.example.com/", "only http and https"),
        ("http://hooks.example.com:99999/", "is not a URL"),
    ],
)
def test_a_webhook_to_this_machine_or_a_private_network_is_refused(url, says):
    problem = webhook_problem(url, NOBODY)
    assert problem is not None and says in problem, problem
    if "only http" not in says and "not a URL" not in says:
        assert ALLOW_ENV in problem  # the error says how an admin would allow it


def test_public_urls_pass_and_the_allowlist_admits_what_it_names():
    for url in (
        "https://hooks.slack.com/services/T/B/X",
        "http://8.8.8.8/",
        "http://[2001:4860::8888]/",
    ):
        assert webhook_problem(url, NOBODY) is None, url
    allow = Allowlist.from_env({ALLOW_ENV: "10.0.0.0/8, chat.intranet ,::1"})
    assert webhook_problem("http://10.9.8.7/hook", allow) is None
    assert webhook_problem("http://[::1]/", allow) is None
    assert webhook_problem("http://chat.intranet/", allow) is None
    assert webhook_problem("http://127.0.0.1/", allow) is not None  # not named
    assert webhook_problem("http://192.168.1.1/", allow) is not None
    assert webhook_problem("ftp://10.9.8.7/", allow) is not None  # never another scheme


@pytest.mark.parametrize(
    "address, says",
    [
        ("x,evil@evil.example", '","'),
        ("ops@example.com;evil@evil.example", '";"'),
        ("ops@example.com\nBcc: evil@evil.example", '"\\n"'),
        ("Ops <ops@example.com>", '" "'),
        ('"x,y"@example.com', "holds"),
        ("ops@example", "is not an email address"),
        ("ops..x@example.com", "is not an email address"),
        ("a" * 65 + "@example.com", "is not an email address"),
    ],
)
def test_an_email_target_is_one_plain_address(address, says):
    problem = email_problem(address)
    assert problem is not None and says in problem, problem


def test_plain_addresses_pass():
    for address in ("alice@example.com", "ops+gates@mail.example.co.uk", "o'neil@example.org"):
        assert email_problem(address) is None, address
