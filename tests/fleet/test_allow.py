"""A worker's allow-list: which repository URLs it may clone. Whoever can write a row to a
shared registry picks the URL, so the refused shapes must stay refused whatever the
patterns, the broadest included; what is accepted is read as git and curl read it (the
hostile-URL table of issue 26, a standard parser's reading, git's own); a local path is
matched where its symlinks lead."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hostileurls
from loopwright.fleet.allow import SCHEMES, Allow, Refused, normalised, refused

# Every pattern form at its broadest: what a careless operator might start a worker with.
EVERYTHING = Allow(["*", "*/*", "https://*/*", "http://*/*", "ssh://*/*", "git://*/*", "file:///*", "*:*"])

# A host name whose last label is not a number (that would be an IPv4 address in curl's eyes).
host = st.from_regex(r"([a-z0-9][a-z0-9-]{0,10}\.){0,2}[a-z][a-z0-9-]{0,8}", fullmatch=True)
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
        ("{tmp}/srv/git/*", "{tmp}/srv/git/app.git", True),
        ("{tmp}/srv/git/*", "file://{tmp}/srv/git/app", True),
        ("file://{tmp}/srv/git/*", "{tmp}/srv/git//app/", True),
        ("{tmp}/srv/git/*", "{tmp}/srv/gitx/app", False),
        ("{tmp}/srv/git/*", "{tmp}/srv/git/none", False),  # no repository there
        ("https://*.example.com/*", "https://git.example.com/a/b", True),
        # A host glob never reaches into the path.
        ("https://*.example.com/*", "https://evil.org/.example.com/a", False),
        ("https://*.example.com/*", "https://evil.org/x.example.com/a", False),
        ("*", "https://anything.org/at/all", True),
        ("*", "ext::sh", False),
    ],
)
def test_patterns(pattern, url, allowed, tmp_path):
    for repo in ("srv/git/app.git", "srv/gitx/app.git"):
        hostileurls.bare(tmp_path / repo)
    pattern, url = pattern.replace("{tmp}", str(tmp_path)), url.replace("{tmp}", str(tmp_path))
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
    if canon.startswith("file:"):
        return  # a local path is matched where it leads on disk (test_a_symlink_…)
    assert EVERYTHING(url) and EVERYTHING(canon)
    assert Allow([canon])(url) and Allow([url])(canon)


# -- issue 26: read a URL exactly as git and curl do ------------------------------------------


@pytest.fixture
def scene(tmp_path):
    s = hostileurls.Scene(tmp_path)
    yield s
    s.close()


@pytest.mark.parametrize("hostile", hostileurls.TABLE, ids=lambda h: h.url)
def test_the_hostile_table_is_refused_by_shape_or_by_the_allow_list(hostile, tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    hostileurls.bare(tmp_path / "outside.git")
    (allowed / "link.git").symlink_to(tmp_path / "outside.git")
    (allowed / "gitfile.git").write_text(f"gitdir: {tmp_path / 'outside.git'}\n")
    url = hostileurls.render(hostile.url, port=4242, redirect=4343, allowed=str(allowed))
    allow = Allow([hostileurls.render(p, redirect=4343, allowed=str(allowed)) for p in hostileurls.ALLOW])
    why = refused(url)
    if hostile.shape:
        assert why is not None and hostile.says in why, why
        assert allow.why_not(url) == why and EVERYTHING.why_not(url) == why
    else:
        assert why is None, why
    if "{redirect}" in hostile.url:
        assert allow(url)  # allowed: git is what must not follow the 302 (test_workspace)
    else:
        assert not allow(url)


@pytest.mark.parametrize(
    "url, canonical",
    [
        ("https://GitHub.COM/acme/x.git", "https://github.com/acme/x"),
        ("https://x-access-token:t0k.en_~!$&'()*+,;=@github.com/acme/x", "https://github.com/acme/x"),
        ("https://github.com:8443/acme/x", "https://github.com:8443/acme/x"),
        ("http://[0:0:0:0:0:0:0:1]:8080/a/b", "http://[::1]:8080/a/b"),
        ("http://[FE80::1]/a", "http://[fe80::1]/a"),
        ("https://192.0.2.1/a", "https://192.0.2.1/a"),
        ("https://xn--bcher-kva.example/a", "https://xn--bcher-kva.example/a"),
        ("ssh://Git@GitHub.com:2222/acme/x", "ssh://Git@github.com:2222/acme/x"),
        ("ssh://[::1]:22/x", "ssh://[::1]:22/x"),
        ("ssh://host/~alice/x", "ssh://host/~alice/x"),
        ("git@host:/abs/x.git", "ssh://git@host/abs/x"),
        ("host:~alice/x", "ssh://host/~alice/x"),
        ("git@host:a@b", "ssh://git@host/~/a@b"),  # an '@' after the colon is in the path
        ("host:22/x", "ssh://host/~/22/x"),  # no port in the scp-like form: a path
        ("git://example.org:9419/x", "git://example.org:9419/x"),
        ("ssh+git://h/x", "ssh://h/x"),
    ],
)
def test_how_an_accepted_url_is_read(url, canonical):
    assert normalised(url) == canonical


@pytest.mark.parametrize(
    "url, says",
    [
        ("https://\u212aernel.org/x", "non-ASCII"),  # KELVIN SIGN: str.lower() makes it 'k'
        ("https://github.com:65535x/a", "port"),
        ("https://[::1/a", "IPv6"),
        ("https://[::1]x/a", "port"),
        ("https://-evil.com/a", "plain host name"),
        ("https://a..b/a", "empty label"),
        ("https://.github.com/a", "empty label"),
        ("https://1.2.3.4.5/a", "numeric host"),
        ("https://256.0.0.1/a", "numeric host"),
        ("https://example.123/a", "numeric host"),
        ("https://a;b.com/a", "plain host name"),
        ("https://user@/a", "no host"),
        ("https://us er@github.com/a", "whitespace"),
        ("https://u[x]@github.com/a", "credentials"),
        ("git@host:a://b", "'://'"),
        ("/srv/a://b", "'://'"),
        ("1x://host/a", "remote helper"),  # git's scheme may start with a digit: git-remote-1x
        ("a/b://host/a", "neither a URL"),
        ("https:github.com/acme/x", "two slashes"),
        ("ssh://git@host:/x", "port"),
    ],
)
def test_more_refused_shapes(url, says):
    why = refused(url)
    assert why is not None and says in why, why


# Pieces of an authority, the ones parsers split on included.
hostchar = st.sampled_from(
    [*"@:?#[]/\\%.", "%40", "github.com", "evil.example", "127.0.0.1", "::1", "8080", "x", "Z_-0"]
)


@settings(max_examples=400)
@given(st.sampled_from(["https", "http", "ssh", "git"]), st.lists(hostchar, max_size=8), segments)
def test_whatever_is_accepted_a_standard_parser_reads_the_same(scheme, auth, segs):
    # Whatever the parser accepts, urllib (which ends the host at '/', '?' or '#' as curl does)
    # finds the same host, port and login: nothing hides in what either of them skips.
    from urllib.parse import urlsplit

    url = f"{scheme}://{''.join(auth)}/" + "/".join(segs)
    if refused(url) is not None:
        return
    theirs = urlsplit(url)
    host = f"[{theirs.hostname}]" if ":" in (theirs.hostname or "") else theirs.hostname
    want = host + (f":{theirs.port}" if theirs.port else "")
    if scheme == "ssh" and theirs.username:
        want = f"{theirs.username}@{want}"
    ours = normalised(url)[len(scheme) + 3 :].split("/", 1)[0]
    if ours.startswith("["):  # urllib does not compress an IPv6 address
        import ipaddress

        ours = ours.replace(ours[1 : ours.index("]")], str(ipaddress.IPv6Address(ours[1 : ours.index("]")])))
    assert ours == want


def _git_reaches(url: str, tmp_path) -> str:
    """The host (with login and port) git hands to ssh for ``url``, by a stand-in ssh."""
    import os
    import subprocess

    from loopwright.fleet.allow import git_url

    fake, said = tmp_path / "ssh", tmp_path / "ssh-args"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > {said}\nexit 1\n')
    fake.chmod(0o755)
    env = dict(os.environ, GIT_SSH=str(fake), GIT_SSH_VARIANT="ssh")
    subprocess.run(["git", "ls-remote", "--", git_url(url)], capture_output=True, env=env, timeout=60)
    args = [a for a in said.read_text().split("\n")[:-2] if a]  # less the remote command
    host = args[-1]
    port = args[args.index("-p") + 1] if "-p" in args else None
    return host, port


@pytest.mark.parametrize(
    "url",
    [
        "ssh://git@github.com/acme/x",
        "git@github.com:acme/x.git",
        "ssh://deploy@GitHub.com:2222/acme/x",
        "git+ssh://git@github.com/~/acme/x",
        "ssh://[::1]:2200/x",
        "ssh://h.example/x",
        "git@h.example:/abs/x",
    ],
)
def test_git_connects_to_the_host_that_was_matched(url, tmp_path):
    host, port = _git_reaches(url, tmp_path)
    login, at, name = host.rpartition("@")
    theirs = f"{login}{at}" + (f"[{name}]" if ":" in name else name.lower()) + (f":{port}" if port else "")
    assert normalised(url)[len("ssh://") :].split("/", 1)[0] == theirs


def test_a_symlink_out_of_the_allowed_directory_is_matched_where_it_leads(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    inner = hostileurls.bare(allowed / "inner.git")
    far = hostileurls.bare(outside / "repo.git") if outside.mkdir() is None else None
    (allowed / "out.git").symlink_to(far)
    (allowed / "in.git").symlink_to(inner)
    (allowed / "gitfile.git").write_text(f"gitdir: {far}\n")
    (allowed / "suffix.git").symlink_to(far)  # `allowed/suffix` is opened as suffix.git
    allow = Allow([f"file://{allowed}/*"])
    for url in (f"file://{allowed}/out.git", f"{allowed}/out", f"{allowed}/gitfile.git", f"{allowed}/suffix"):
        why = allow.why_not(url)
        assert why == f"no --allow-repo pattern matches file://{outside}/repo (where {url} leads)", why
    # Inside, it is allowed, and git is given the real directory that was matched.
    assert allow.resolve(f"{allowed}/in.git") == str(inner)
    assert allow.resolve(f"file://{allowed}/inner") == str(inner)


def test_a_repository_git_could_read_as_another_is_refused(tmp_path):
    repo = hostileurls.bare(tmp_path / "allowed" / "app.git")
    other = hostileurls.bare(tmp_path / "other.git")
    allow = Allow([f"{tmp_path}/allowed/*"])
    assert allow(str(repo))
    (repo / ".git").symlink_to(other)  # git tries app.git/.git before app.git: it opens other.git
    assert (
        allow.why_not(str(repo))
        == f"no --allow-repo pattern matches file://{tmp_path}/other (where {repo} leads)"
    )
    (repo / ".git").unlink()
    # A work tree's .git holding a .git: given the .git directory itself, git would open that one.
    hostileurls.bare(tmp_path / "allowed" / "wt" / ".git")
    (tmp_path / "allowed" / "wt" / ".git" / ".git").symlink_to(other)
    assert "holds a .git of its own" in allow.why_not(f"{tmp_path}/allowed/wt")
    (tmp_path / "allowed" / "plain.git").write_text("not a gitdir line\n")
    assert "not a .git file" in allow.why_not(f"{tmp_path}/allowed/plain.git")
    assert "no git repository" in allow.why_not(f"{tmp_path}/allowed/none.git")


def test_a_local_pattern_under_a_symlinked_directory_still_matches(tmp_path):
    real = tmp_path / "real"
    hostileurls.bare(real / "git" / "app.git")
    (tmp_path / "srv").symlink_to(real)
    assert Allow([f"{tmp_path}/srv/git/*"])(f"{tmp_path}/srv/git/app.git")
    assert Allow([f"file://{tmp_path}/srv/git/app"])(f"{real}/git/app.git")
