"""The resident Stop server through the real Claude Code CLI: a loop's first Stop is answered
in the hook's own process and starts the server; the later ones are answered by it, and the
loop runs exactly as it would without it.

Which process answered is read from what each hook process imported (`python -X importtime`
through a LOOPWRIGHT_PYTHON wrapper): a Stop the server answers imports no loopwright module in
the hook's process, only the socket module."""

from __future__ import annotations

import pytest

import fakeapi  # noqa: E402
from e2e_support import history, is_block, loop_json, stop_answers  # noqa: E402
from hooktrace import imported, listening, our_socket, traced_python  # noqa: E402
from waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.e2e


def test_later_stops_are_answered_by_the_resident_server(claude, project, tmp_path):
    wrapper, traces = traced_python(tmp_path)
    sock = our_socket(claude.home / ".claude" / "plugins" / "data" / "loopwright-inline" / "pycache")

    def once_served(reply):
        """The model's second turn comes only once the server the first Stop started listens."""

        def answer(request):
            wait_for(lambda: listening(sock), "the resident Stop server", within=60)
            return reply

        return answer

    res = claude.run(
        '/loopwright:loop "Write the module" --max-iterations 4 --completion-promise DONE',
        [
            fakeapi.text("Iteration one."),
            once_served(fakeapi.text("Iteration two.")),
            fakeapi.text("Iteration three."),
            fakeapi.text("All done.\n<promise>DONE</promise>"),
        ],
        env={"LOOPWRIGHT_PYTHON": str(wrapper)},
    )
    assert res.returncode == 0, res.describe()
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, True, False], answers
    assert "ended: LOOP_DONE" in answers[3]["systemMessage"]
    assert [h["outcome"] for h in history(project)] == ["continued", "continued", "continued", "LOOP_DONE"]
    assert loop_json(project)["outcome"] == "LOOP_DONE"

    processes = [imported(log) for log in traces.iterdir()]
    in_process = [m for m in processes if "loopwright.events.stop" in m]
    served = [m for m in processes if "_socket" in m and not any(n.startswith("loopwright") for n in m)]
    assert len(in_process) == 1, processes  # the first Stop
    assert len(served) == 3, processes  # the second, third and last
