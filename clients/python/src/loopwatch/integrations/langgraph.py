"""LangGraph's `interrupt` as the approval hook: a `require_approval` pauses the graph, a
human answers, and `Command(resume=True)` / `Command(resume=False)` approves or denies.

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command
    from loopwatch.integrations.langchain import LoopwatchMiddleware
    from loopwatch.integrations.langgraph import interrupt_for_approval

    guard = loopwatch.Guard(check=True, on_approval=interrupt_for_approval)
    agent = create_agent(model, tools, middleware=[LoopwatchMiddleware(guard)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    with guard.run("support"):
        state = agent.invoke({"messages": [...]}, config)
        while "__interrupt__" in state:                  # paused for approval
            request = state["__interrupt__"][0].value    # see `approval_payload`
            state = agent.invoke(Command(resume=ask_a_human(request)), config)

How it works: the guard calls the hook inside a graph node (the middleware's `before_model`
for a `require_approval` signal, the tool node for a pre-execution check). The first time,
`interrupt()` raises `GraphInterrupt`: the node stops, the graph is checkpointed, `invoke`
returns with `__interrupt__`. The guard keeps the approval pending, and a checked tool
call that paused sends no span (it has not run). On `Command(resume=answer)` LangGraph runs
the node again; the guard asks the hook again (the pending signal, or the same check, which
loopwatch answers the same), and `interrupt()` now returns `answer`. The guard then records
it (span event `loopwatch.approval`), posts `/approve` or `/deny`, and on deny raises
`LoopDetected(action="approval_denied")` out of `invoke`.

Resume inside the same `guard.run()` scope: the pending approval belongs to that run (a new
scope is a new trace, i.e. a new run for loopwatch, and would not ask again). To answer from
elsewhere, post the answer yourself with `guard.approve(payload["run_key"])` /
`guard.deny(...)`. The graph needs a checkpointer, as for any LangGraph interrupt.
"""

from __future__ import annotations

from typing import Any

try:
    from langgraph.types import interrupt
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.langgraph needs `pip install loopwatch[langchain]`") from err

from ..approval import ApprovalRequest, read_answer

#: `kind` of the interrupt value, telling loopwatch's interrupts from the app's own.
INTERRUPT_KIND = "loopwatch.approval"


def approval_payload(request: ApprovalRequest) -> dict[str, Any]:
    """The interrupt value shown to the approver (JSON-serializable, as checkpointers store it).

    Keys: `kind` (`"loopwatch.approval"`), `run_key`, `trace_id`, `message` (loopwatch's
    text about the loop), `pattern`, `profile`, `tool_name` and `arguments` (the call about
    to run, for a pre-execution check; else None), `signal_id` (for a signal; else None).
    """
    return {
        "kind": INTERRUPT_KIND,
        "run_key": request.run.run_key,
        "trace_id": request.run.trace_id,
        "message": request.message,
        "pattern": request.pattern,
        "profile": request.profile,
        "tool_name": request.tool_name,
        "arguments": request.arguments,
        "signal_id": request.signal.id if request.signal is not None else None,
    }


def interrupt_for_approval(request: ApprovalRequest) -> bool:
    """Approval hook (`Guard(on_approval=interrupt_for_approval)`) pausing the LangGraph graph
    with `interrupt(approval_payload(request))`.

    Returns the resume value read as an answer: True / `"approve"` approves, False /
    `"deny"` denies. Raises `GraphInterrupt` (LangGraph's pause) until resumed, RuntimeError
    outside a LangGraph node, ConfigError for a resume value that is no answer.
    """
    return read_answer(interrupt(approval_payload(request)))
