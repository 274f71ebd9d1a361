"""Processes that race each other in a test (claims, reservations, migrations): started by a
fork server that imported the registry, psycopg and the test's own module once, so each of
the 64 racers is a fork, not a new interpreter importing it all again (spawn cost ~0.6 s of
CPU a process). The fork server is a process of one thread, so forking it is safe where
forking a test process, with pytest-xdist's threads, is not."""

from __future__ import annotations

import multiprocessing

PRELOAD = ["psycopg", "psycopg_pool", "loopwright.registry", "loopwright.registry.postgres"]


def context(module: str):
    """The multiprocessing context whose processes run functions of the test module ``module``
    (its ``__name__``)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, module])
    return ctx
