"""loopwatch client: trace an agent to loopwatch and let loopwatch stop its loops.

    import loopwatch
    loopwatch.instrument(service_name="support-bot")      # OpenTelemetry -> loopwatch
    guard = loopwatch.Guard(check=True)                    # signals + pre-execution check
    with guard.run("support-bot") as run:                  # one agent run
        ...                                                # LoopDetected stops it

Integrations for agent frameworks are in `loopwatch.integrations` (one module each).
"""

from .approval import ApprovalRequest
from .check import CheckResult
from .errors import AdminError, ConfigError, LoopDetected, LoopwatchError, TransportError
from .guard import DECISION_ATTRIBUTE, Guard
from .run import Run, current_run
from .signal import Signal
from .tool_call import ToolCall
from .tracing import Instrumentation, ToolSpanFlushProcessor, instrument, is_tool_span

__all__ = [
    "AdminError",
    "ApprovalRequest",
    "CheckResult",
    "ConfigError",
    "DECISION_ATTRIBUTE",
    "Guard",
    "Instrumentation",
    "LoopDetected",
    "LoopwatchError",
    "Run",
    "Signal",
    "ToolCall",
    "ToolSpanFlushProcessor",
    "TransportError",
    "current_run",
    "instrument",
    "is_tool_span",
]

__version__ = "0.1.0"
