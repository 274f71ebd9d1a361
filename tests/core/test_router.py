"""The router as a pure function: snapshot in, decision out."""

from loopwright import modes
from loopwright.core import router
from loopwright.state.transcript import Cursor, Increment

T0 = 1_800_000_000.0


def make_loop(**kw):
    loop = {
        "name": "prompt",
        "mode": "prompt",
        "prompt": "make the tests pass",
        "completion_promise": "DONE",
        "max_iterations": 5,
        "max_minutes": 60,
        "max_tokens": None,
        "max_dollars": 25.0,
        "owner_session": "S",
        "started_at": "2027-01-15T08:00:00Z",
        "status": "active",
        # These tests are about the rules before a wrap-up turn; tests/core/test_wrapup.py has it.
        "wrap_up": False,
    }
    loop.update(kw)
    return loop


def snap(
    loop=None,
    budget=None,
    *,
    now=None,
    message="still working",
    used_tool=False,
    usage=None,
    stop_hook_active=True,
    final_blocks=None,
    **kw,
):
    loop = loop or make_loop()
    budget = budget if budget is not None else router.initial_budget(loop)
    turn = Increment(
        cursor=Cursor(path="/t", offset=10),
        used_tool=used_tool,
        usage=usage or {},
        final_blocks=final_blocks or [],
    )
    started = T0  # 2027-01-15T08:00:00Z
    return router.Snapshot(
        mode=modes.for_loop(loop),
        now=now or started + 60,
        session_id="S",
        loop=loop,
        budget=budget,
        turn=turn,
        last_message=message,
        stop_hook_active=stop_hook_active,
        **kw,
    )


def advance(decision):
    return decision.budget


def test_first_stop_continues_with_the_goal_and_status():
    d = router.decide(snap())
    assert d.action == router.CONTINUE and d.iteration == 1
    assert "iteration 2 of 5" in d.prompt and "make the tests pass" in d.prompt
    assert "<promise>DONE</promise>" in d.prompt
    assert d.system_message.startswith("loopwright · prompt · iteration 2/5")
    assert d.budget["iterations_used"] == 1
    assert d.history["outcome"] == "continued"


def test_sentinel_ends_the_loop_done():
    d = router.decide(snap(message="All green.\n<promise>DONE</promise>"))
    assert d.action == router.STOP and d.outcome == router.LOOP_DONE
    assert d.history["stop_conditions_fired"] == ["completion"]


def test_completion_on_the_last_allowed_iteration_is_done_not_exhausted():
    b = router.initial_budget(make_loop())
    b["iterations_used"] = 4
    d = router.decide(snap(budget=b, message="<promise>DONE</promise>"))
    assert d.outcome == router.LOOP_DONE and d.iteration == 5


def test_nth_stop_ends_with_max_iterations():
    b = router.initial_budget(make_loop())
    b["iterations_used"] = 4
    d = router.decide(snap(budget=b))
    assert d.outcome == router.MAX_ITERATIONS and d.budget["iterations_used"] == 5


def test_iterations_count_up_to_the_limit():
    s = snap()
    budget = s.budget
    actions = []
    for _ in range(5):
        d = router.decide(snap(budget=budget))
        actions.append(d.action)
        budget = d.budget
    assert actions == [router.CONTINUE] * 4 + [router.STOP]


def test_wall_clock_from_persisted_start():
    loop = make_loop(max_minutes=30)
    d = router.decide(snap(loop=loop, now=T0 + 31 * 60))
    assert d.outcome == "BUDGET_EXHAUSTED:minutes"
    assert d.history["stop_conditions_fired"] == ["wall_clock_budget"]


def test_token_budget():
    loop = make_loop(max_tokens=100)
    usage = {
        "m": {
            "input_tokens": 80,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    d = router.decide(snap(loop=loop, usage=usage))
    assert d.outcome == "BUDGET_EXHAUSTED:tokens"


def test_stop_request_and_cancel():
    d = router.decide(snap(stop_request={"reason": "timeout"}))
    assert d.outcome == "STOPPED:timeout"
    d = router.decide(snap(cancelled=True, message="<promise>DONE</promise>"))
    assert d.outcome == router.CANCELLED  # a tombstone beats everything


def test_foreign_live_lock_steps_back_without_counting():
    d = router.decide(snap(lock={"owner": "session:other"}, lock_state=router.LOCK_FOREIGN))
    assert d.action == router.HOLD and d.budget is None
    assert "session:other" in d.system_message


def test_sentinel_in_earlier_block_of_the_same_message_counts_when_transcript_caught_up():
    d = router.decide(snap(message="final words", final_blocks=["<promise>DONE</promise>", "final words"]))
    assert d.outcome == router.LOOP_DONE


def test_stale_transcript_is_not_trusted_over_last_message():
    # The transcript still shows an earlier message of the turn that had the sentinel.
    d = router.decide(snap(message="actually not done", final_blocks=["<promise>DONE</promise>"]))
    assert d.action == router.CONTINUE


def test_transcript_is_used_when_last_message_is_absent():
    d = router.decide(snap(message=None, final_blocks=["ok", "<promise>DONE</promise>"]))
    assert d.outcome == router.LOOP_DONE


def test_usage_is_added_to_the_budget_and_history():
    usage = {
        "claude-x": {
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 4,
        }
    }
    d = router.decide(snap(usage=usage))
    assert d.budget["tokens_in"] == 100 and d.budget["tokens_out"] == 10
    assert d.budget["tokens_by_model"]["claude-x"]["cache_read_input_tokens"] == 4
    assert d.history["tokens_in_this_iter"] == 100


def test_block_cap_pauses_instead_of_being_overridden():
    budget = router.initial_budget(make_loop(max_iterations=50))
    d = router.decide(snap(loop=make_loop(max_iterations=50), budget=budget, stop_hook_active=False))
    actions = [d.action]
    for _ in range(9):
        d = router.decide(snap(loop=make_loop(max_iterations=50), budget=d.budget, stop_hook_active=True))
        actions.append(d.action)
        if d.action == router.PAUSE:
            break
    # Claude Code honours 8 blocks in a row without a tool call and overrides the 9th.
    assert actions == [router.CONTINUE] * 8 + [router.PAUSE]
    assert "block cap" in d.system_message
    # The next user turn resumes the loop and records the pause.
    d2 = router.decide(snap(loop=make_loop(max_iterations=50), budget=d.budget, stop_hook_active=False))
    assert d2.action == router.CONTINUE
    assert d2.budget["router"]["pauses"][0]["why"] == "block-cap"
    assert "resumed" in d2.prompt


def test_tool_use_resets_the_block_cap_count():
    loop = make_loop(max_iterations=50)
    d = router.decide(snap(loop=loop, stop_hook_active=False))
    for i in range(20):
        d = router.decide(snap(loop=loop, budget=d.budget, used_tool=(i % 5 == 4)))
        assert d.action == router.CONTINUE


def test_block_cap_zero_disables_pausing():
    loop = make_loop(max_iterations=50)
    d = router.decide(snap(loop=loop, stop_hook_active=False, block_cap=0))
    for _ in range(15):
        d = router.decide(snap(loop=loop, budget=d.budget, block_cap=0))
        assert d.action == router.CONTINUE


def test_interrupt_is_noticed_when_a_user_turn_follows_a_block():
    d = router.decide(snap())
    d2 = router.decide(snap(budget=d.budget, stop_hook_active=False))
    assert d2.budget["router"]["pauses"][-1]["why"] == "interrupted"
    assert any(j["event"] == "resume" for j in d2.journal)


def test_decide_does_not_mutate_its_input():
    s = snap()
    before = repr(s.budget)
    router.decide(s)
    assert repr(s.budget) == before
