from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CheckRequest(_message.Message):
    __slots__ = ("trace_id", "run_key", "tool_name", "arguments")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    run_key: str
    tool_name: str
    arguments: str
    def __init__(self, trace_id: _Optional[str] = ..., run_key: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("decision", "pattern", "count", "message", "profile", "known_run")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    KNOWN_RUN_FIELD_NUMBER: _ClassVar[int]
    decision: str
    pattern: str
    count: int
    message: str
    profile: str
    known_run: bool
    def __init__(self, decision: _Optional[str] = ..., pattern: _Optional[str] = ..., count: _Optional[int] = ..., message: _Optional[str] = ..., profile: _Optional[str] = ..., known_run: _Optional[bool] = ...) -> None: ...
