"""A claim asks the worker about what a loop's spec asks of it (its verify, a shell command the
row's writer chose): a loop it refuses stays queued for another worker, on a first claim and on a
failover, whatever JSON spelling hides the key; a loop without one is taken as fast as before
(on PostgreSQL, by the one statement that finds it, without asking)."""

from __future__ import annotations

REPO = "https://example.com/acme/app.git"


class Asked:
    """A worker's ``accepts``: runs only the verify commands it is given; records each row asked."""

    def __init__(self, *allowed: str) -> None:
        self.allowed, self.rows = allowed, []

    def __call__(self, row: dict) -> bool:
        self.rows.append(row["name"])
        verify = (row.get("spec") or {}).get("verify")
        return verify is None or verify in self.allowed


def test_a_loop_whose_verify_the_worker_refuses_stays_queued_for_one_that_accepts(reg):
    reg.submit(kind="prompt", spec={"goal": "a", "verify": "make check"}, repo=REPO, name="checked")
    reg.submit(kind="prompt", spec={"goal": "b"}, repo=REPO, name="plain")
    strict = Asked()
    assert reg.claim("w1", "h1", accepts=strict)["name"] == "plain"  # the older loop is left
    assert reg.claim("w1", "h1", accepts=strict) is None
    assert reg.fleet_loop("checked")["status"] == "queued" and "checked" in strict.rows
    assert reg.claim("w2", "h2", accepts=Asked("make check"))["name"] == "checked"


def test_a_failover_goes_only_to_a_worker_that_accepts_the_verify(reg):
    reg.submit(kind="prompt", spec={"goal": "a", "verify": "make check"}, repo=REPO, name="checked")
    assert reg.claim("w1", "h1", accepts=Asked("make check"))["name"] == "checked"
    with reg.backend.tx() as tx:  # its worker went away: the lease ran out long ago
        tx.run("UPDATE fleet_loops SET lease_expires = lease_expires - 1000")
    assert reg.claim("w2", "h2", accepts=Asked()) is None
    taken = reg.claim("w3", "h3", accepts=Asked("make check"))
    assert taken["name"] == "checked" and taken["failovers"] == 1


def test_a_verify_key_spelled_with_escapes_is_still_asked_about(reg):
    for name, text in (
        ("escaped", '{"goal": "a", "\\u0076erify": "touch /tmp/x"}'),  # JSON for the key "verify"
        ("spaced", '{ "goal" : "a" , "verify" : "touch /tmp/x" }'),
    ):
        reg.submit(kind="prompt", spec={"goal": "placeholder"}, repo=REPO, name=name)
        with reg.backend.tx() as tx:  # the row as anyone who can write to the table could write it
            tx.run("UPDATE fleet_loops SET spec = %s WHERE name = %s", (text, name))
    strict = Asked()
    assert reg.claim("w1", "h1", accepts=strict) is None
    assert strict.rows == ["escaped", "spaced"]
    assert {r["status"] for r in reg.fleet_loops()} == {"queued"}


def test_a_loop_without_a_verify_is_claimed_at_once(reg, registry_url):
    reg.submit(kind="prompt", spec={"goal": "verify the docs", "limits": {"max_iterations": 2}}, repo=REPO,
               name="plain")  # fmt: skip
    asked = Asked()

    def allowed(repo: str) -> bool:
        return True

    assert reg.claim("w1", "h1", accepts=asked, allowed=allowed)["name"] == "plain"
    if registry_url.startswith("postgresql://"):
        # The claim's one statement took it (the first claim of a repository is asked about it
        # in a transaction; after that the statement knows the repository and the spec's shape).
        reg.submit(kind="prompt", spec={"goal": "next"}, repo=REPO, name="next")
        asked.rows.clear()
        assert reg.claim("w1", "h1", accepts=asked, allowed=allowed)["name"] == "next"
        assert asked.rows == []
