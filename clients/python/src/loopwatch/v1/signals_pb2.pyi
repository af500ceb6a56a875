from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class WatchRequest(_message.Message):
    __slots__ = ("service_name", "trace_id", "action")
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    service_name: str
    trace_id: str
    action: str
    def __init__(self, service_name: _Optional[str] = ..., trace_id: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class Signal(_message.Message):
    __slots__ = ("schema", "id", "occurrence", "severity", "time_unix_nano", "trace_id", "run_key", "service_name", "agent_name", "profile", "action", "pattern", "tool_names", "count", "window", "fingerprints", "span_ids", "first_span_id", "message")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_KEY_FIELD_NUMBER: _ClassVar[int]
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    SPAN_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    schema: str
    id: str
    occurrence: int
    severity: str
    time_unix_nano: int
    trace_id: str
    run_key: str
    service_name: str
    agent_name: str
    profile: str
    action: str
    pattern: str
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    count: int
    window: int
    fingerprints: _containers.RepeatedScalarFieldContainer[str]
    span_ids: _containers.RepeatedScalarFieldContainer[str]
    first_span_id: str
    message: str
    def __init__(self, schema: _Optional[str] = ..., id: _Optional[str] = ..., occurrence: _Optional[int] = ..., severity: _Optional[str] = ..., time_unix_nano: _Optional[int] = ..., trace_id: _Optional[str] = ..., run_key: _Optional[str] = ..., service_name: _Optional[str] = ..., agent_name: _Optional[str] = ..., profile: _Optional[str] = ..., action: _Optional[str] = ..., pattern: _Optional[str] = ..., tool_names: _Optional[_Iterable[str]] = ..., count: _Optional[int] = ..., window: _Optional[int] = ..., fingerprints: _Optional[_Iterable[str]] = ..., span_ids: _Optional[_Iterable[str]] = ..., first_span_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
