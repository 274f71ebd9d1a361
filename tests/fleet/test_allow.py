"""A worker's allow-list: which repository URLs it may clone. Whoever can write a row to a
shared registry picks the URL, so the refused shapes must stay refused whatever the
patterns, the broadest included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.fleet.allow import SCHEMES, Allow, Refused, normalised, refused

# Every pattern form at its broadest: what a careless operator might start a worker with.
EVERYTHING = Allow(["*", "*/*", "https://*/*", "http://*/*", "ssh://*/*", "git://*/*", "file:///*", "*:*"])

host = st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}(\.[a-z0-9-]{1,8}){0,2}", fullmatch=True)
segment = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
segments = st.lists(segment, min_size=1, max_size=4)
FORMS = {
    "https": lambda h, segs: f"https://{h}/" + "/".join(segs),
    "ssh": lambda h, segs: f"ssh://git@{h}/" + "/".join(segs),
    "scp": lambda h, segs: f"git@{h}:" + "/".join(segs),
    "file": lambda h, segs: "file:///" + "/".join(segs),
    "path": lambda h, segs: "/" + "/".join(segs),
}
forms = st.sampled_from(sorted(FORMS))
good_url = st.builds(lambda form, h, segs: FORMS[form](h, segs), forms, host, segments)
# Line breaks, tab, space, NUL, escape, DEL, C1 NEL, line separator, a bidi override, ideographic space.
bad_chars = st.sampled_from(
    ["\n", "\r", "\t", " ", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\u3000"]
)
bad_chars = bad_chars | st.characters(categories=["Cc", "Cf", "Zs"])


def assert_refused(url: str) -> None:
    why = EVERYTHING.why_not(url)
    assert why is not None, f"{url!r} got through"
    assert "\n" not in why and why == refused(url)
    assert not EVERYTHING(url)
    with pytest.raises(Refused):
        normalised(url)


@given(st.text())
def test_a_url_starting_with_a_dash_is_refused(rest):
    assert_refused("-" + rest)


@given(st.from_regex(r"[A-Za-z0-9+.-]{0,12}", fullmatch=True), st.text())
def test_a_remote_helper_url_is_refused(transport, rest):
    assert_refused(f"{transport}::{rest}")


def test_the_helpers_that_run_programs_are_refused():
    for url in ("ext::sh -c touch% /tmp/x", "ext::ssh -oProxyCommand=x host", "fd::3", "::x", "ext::x"):
        assert_refused(url)


@given(good_url, bad_chars, st.data())
def test_a_control_character_or_whitespace_anywhere_is_refused(url, char, data):
    at = data.draw(st.integers(0, len(url)))
    assert_refused(url[:at] + char + url[at:])


@given(forms, host, segments, st.sampled_from(["..", "."]), st.data())
def test_a_dot_segment_anywhere_in_the_path_is_refused(form, h, segs, dots, data):
    # `https://github.com/acme/../evil/x` matches `https://github.com/acme/*` as text, but
    # curl or the filesystem would resolve it outside acme/.
    at = data.draw(st.integers(0, len(segs)))
    assert_refused(FORMS[form](h, [*segs[:at], dots, *segs[at:]]))


@given(good_url, st.sampled_from(["%2e%2e", "%2F", "%41", "%"]))
def test_percent_encoding_in_the_path_is_refused(url, escape):
    # git decodes %XX in a URL: %2e%2e would become '..' after the match.
    assert_refused(url + "/" + escape + "x")


known = st.sampled_from([*SCHEMES, "git+ssh", "ssh+git", "ext", "fd", "HTTPS", "Ssh", "ftp", "hg"])


@given(st.one_of(known, st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,10}", fullmatch=True)), host, segments)
def test_a_scheme_git_would_hand_to_a_helper_is_refused(scheme, h, segs):
    url = f"{scheme}://{h}/" + "/".join(segs)
    if scheme in ("https", "http", "ssh", "git", "git+ssh", "ssh+git"):
        assert EVERYTHING(url)
    else:  # file:// with a host is refused too (git would read a local path)
        assert_refused(url)


@given(st.from_regex(r"[A-Za-z0-9_.~][A-Za-z0-9_./~-]{0,30}", fullmatch=True).filter(lambda s: ":" not in s))
def test_a_relative_path_is_refused(rel):
    assert_refused(rel)


def test_the_other_refused_shapes():
    for url in (
        "",
        "https://x.org/" + "a" * 2000,
        "file://otherhost/srv/repo",  # git would ignore the host and read a local path
        "ssh://-oProxyCommand=touch%20x/repo",
        "ssh://-oProxyCommand=x@host/repo",
        "git@-oProxyCommand=x:repo",
        "https://host name/x",
        "https://github.com",  # no repository path
        "https://github.com/.git",
        "HTTPS://github.com/acme/x",  # git compares schemes case-sensitively: a helper lookup
        "https://github.com/acme\\..\\evil/x",
    ):
        assert_refused(url)


def test_no_pattern_allows_nothing():
    allow = Allow([])
    assert allow.why_not("https://github.com/acme/x") == (
        "this worker allows no repository: start it with --allow-repo PATTERN"
    )
    assert not allow("/srv/git/x")


@pytest.mark.parametrize(
    "pattern, url, allowed",
    [
        ("https://github.com/acme/*", "https://github.com/acme/app.git", True),
        ("https://github.com/acme/*", "https://github.com/acme/app/", True),
        ("https://github.com/acme/*", "https://x-access-token:t0k@github.com/acme/app", True),
        ("https://github.com/acme/*", "https://GitHub.COM/acme/app", True),
        ("https://github.com/acme/*", "https://github.com/ACME/app", False),  # paths are case-sensitive
        ("https://github.com/acme/*", "https://github.com/acmeco/app", False),
        ("https://github.com/acme/*", "http://github.com/acme/app", False),
        ("https://github.com/acme/app", "https://github.com/acme/app.git", True),
        ("https://github.com/acme/app", "https://github.com/acme/app2", False),
        ("git@github.com:acme/*", "git@github.com:acme/app.git", True),
        ("git@github.com:acme/*", "ssh://git@github.com/~/acme/app", True),
        ("git@github.com:acme/*", "git+ssh://git@github.com/~/acme/app", True),
        # scp-like paths are relative to the login's home; ssh:// paths are absolute.
        ("git@github.com:acme/*", "ssh://git@github.com/acme/app", False),
        ("git@github.com:acme/*", "bob@github.com:acme/app", False),
        ("/srv/git/*", "/srv/git/app.git", True),
        ("/srv/git/*", "file:///srv/git/app", True),
        ("file:///srv/git/*", "/srv/git//app/", True),
        ("/srv/git/*", "/srv/gitx/app", False),
        ("https://*.example.com/*", "https://git.example.com/a/b", True),
        # A host glob never reaches into the path.
        ("https://*.example.com/*", "https://evil.org/.example.com/a", False),
        ("https://*.example.com/*", "https://evil.org/x.example.com/a", False),
        ("*", "https://anything.org/at/all", True),
        ("*", "ext::sh", False),
    ],
)
def test_patterns(pattern, url, allowed):
    assert Allow([pattern])(url) is allowed, Allow([pattern]).why_not(url)


def test_the_refusal_names_the_canonical_url_without_credentials():
    why = Allow(["https://github.com/acme/*"]).why_not("https://me:s3cret@github.com/other/x.git")
    assert why == "no --allow-repo pattern matches https://github.com/other/x"


@pytest.mark.parametrize("pattern", ["", "https://github.com", "https://*", "a b", "https://x/\n"])
def test_a_pattern_that_names_no_repository_is_an_error(pattern):
    with pytest.raises(ValueError):
        Allow([pattern])


@given(host, host, st.lists(st.one_of(segment, st.just(".example.com"), host), min_size=1, max_size=4))
def test_a_host_glob_only_matches_hosts(h, other, segs):
    allow = Allow([f"https://*.{h}/*"])
    url = f"https://{other}/" + "/".join(segs)
    assert allow(url) == other.endswith("." + h)


@given(good_url)
def test_matching_agrees_with_the_canonical_form(url):
    canon = normalised(url)
    assert normalised(canon) == canon
    assert EVERYTHING(url) and EVERYTHING(canon)
    assert Allow([canon])(url) and Allow([url])(canon)
