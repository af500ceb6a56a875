"""Integrations of the guard with agent frameworks, one module each (import the one you use;
each imports its framework lazily and raises ImportError naming the extra when missing):

| module | framework | hook |
|---|---|---|
| `pydantic_ai` | pydantic-ai ≥ 2.68 | `LoopwatchCapability` (an agent capability) |
| `openai_agents` | OpenAI Agents SDK ≥ 0.24 | `LoopwatchHooks` (run hooks + model input filter) |
| `langchain` | LangChain v1 / LangGraph | `LoopwatchMiddleware` (agent middleware) |
| `langgraph` | LangGraph ≥ 1.0 | `interrupt_for_approval` (approval hook: `interrupt`, resumed with `Command(resume=…)`) |
| `smolagents` | smolagents ≥ 1.20 | `guard_agent` (wraps the agent's tools, step callback) |
| `crewai` | CrewAI ≥ 1.15 | `LoopwatchCrewHooks` (tool and LLM call hooks) |

Hand-written loops need no integration: `Guard.run()`, `Guard.tool` / `Guard.tool_call`.
"""

NUDGE_PREFIX = "[loopwatch] "


def nudge_text(message: str) -> str:
    """The text shown to the model for a loopwatch nudge."""
    return NUDGE_PREFIX + message
