use super::*;
use serde_json::json;

#[test]
fn literals_nested_past_the_cap_are_not_parsed() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(
        super::python_literal(&nested(MAX_LITERAL_DEPTH)),
        serde_json::from_str(&nested(MAX_LITERAL_DEPTH)).ok()
    );
    // Deep nesting (seconds of backtracking without the cap) is left unparsed.
    assert_eq!(super::python_literal(&nested(40)), None);
    assert_eq!(super::python_literal(&"{1:".repeat(40)), None);
    // Brackets inside strings do not count.
    let quoted = format!(
        "{{'q': '{}', \"r\": \"{}\"}}",
        "(".repeat(20),
        "[".repeat(20)
    );
    assert_eq!(literal_depth(&quoted), 1);
    assert!(super::python_literal(&quoted).is_some());
    assert_eq!(literal_depth(r"['a\'[', ([{}])]"), 4);
}

#[test]
fn python_literal_arguments() {
    assert_eq!(
        normalize_arguments(Payload::Text(
            "{'query': 'refund policy', 'n': 3, 'x': None}".into()
        )),
        Payload::Json(json!({"query": "refund policy", "n": 3, "x": null}))
    );
    // JSON and plain text stay as they are.
    let json_text = Payload::Text(r#"{"a":1}"#.into());
    assert_eq!(normalize_arguments(json_text.clone()), json_text);
    let plain = Payload::Text("hello".into());
    assert_eq!(normalize_arguments(plain.clone()), plain);
}

#[test]
fn tool_message_json_and_repr_read_the_same() {
    let json_form = Payload::Text(
        r#"{"output": {"type": "tool", "data": {"content": "No documents found.", "type": "tool", "name": "search_docs", "id": null, "tool_call_id": "call_01", "status": "success"}}}"#.into(),
    );
    let repr_form = Payload::Text(
        r#"{"output": "content='No documents found.' name='search_docs' tool_call_id='call_02'"}"#
            .into(),
    );
    let want = Payload::Json(json!("No documents found."));
    assert_eq!(normalize_result(json_form), want);
    assert_eq!(normalize_result(repr_form), want);
    // A bare repr, with quotes and spaces inside the content.
    assert_eq!(
        normalize_result(Payload::Text(
            "content='a b=c \\'x\\'' name='t' tool_call_id='id_9' artifact=None".into()
        )),
        Payload::Json(json!("a b=c 'x'"))
    );
}

#[test]
fn error_tool_message_keeps_its_status_without_ids() {
    let error =
        Payload::Json(json!({"type":"tool","content":"boom","tool_call_id":"c1","status":"error"}));
    assert_eq!(
        normalize_result(error),
        Payload::Json(json!({"type":"tool","content":"boom","status":"error"}))
    );
}

#[test]
fn call_tool_result_text_parts() {
    let mcp = Payload::Text(
        r#"{"content":[{"type":"text","text":"Ticket T-1001: open"}],"isError":false}"#.into(),
    );
    assert_eq!(
        normalize_result(mcp),
        Payload::Json(json!("Ticket T-1001: open"))
    );
    let error = Payload::Json(json!({"content":[{"type":"text","text":"x"}],"isError":true}));
    assert_eq!(normalize_result(error.clone()), error);
    let image = Payload::Json(json!({"content":[{"type":"image","data":"AA=="}]}));
    assert_eq!(
        normalize_result(image),
        Payload::Json(json!([{"type":"image","data":"AA=="}]))
    );
}

#[test]
fn is_json_agrees_with_building_the_value() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    for text in [
        r#"{"a": [1, {"b": null}]}"#.to_string(),
        "{'a': 1}".into(),
        "[1, 2".into(),
        r#"{"a": 1} x"#.into(),
        deep(128),
        deep(129),
        deep(400),
    ] {
        assert_eq!(
            is_json(&text),
            serde_json::from_str::<Json>(&text).is_ok(),
            "{text:.40}"
        );
    }
    assert!(!is_json(&deep(129)), "past serde_json's nesting limit");
}

#[test]
fn may_wrap_reads_top_level_keys_only() {
    assert!(may_wrap(r#"{"output": {"a": [1, 2]}}"#));
    assert!(
        may_wrap(r#"{"output": 1, "output": 2}"#),
        "duplicates: one key"
    );
    assert!(may_wrap(r#"{"id": "m1", "type": "tool", "data": {}}"#));
    assert!(may_wrap(
        r#"{"content": [], "isError": false, "_meta": {}}"#
    ));
    assert!(!may_wrap(r#"{"output": "x", "other": 1}"#));
    assert!(!may_wrap(r#"{"type": "ai", "content": "x"}"#));
    assert!(!may_wrap(r#"{"type": {"k": "tool"}}"#));
    assert!(!may_wrap(r#"{"content": [], "extra": 1}"#));
    assert!(!may_wrap(r#"{"hits": [{"output": 1}], "total": 2}"#));
    assert!(!may_wrap("{}"));
    assert!(!may_wrap(r#"{"output": "#), "not JSON: no wrapper");
    assert!(may_wrap(r#"{"\u006futput": 1}"#), "an escaped key is read");
    assert!(may_wrap(r#"{"type": "t\u006fol", "tool_call_id": "c"}"#));
}

#[test]
fn text_and_json_results_unwrap_alike() {
    for value in [
        json!({"output": "{\"a\": 1}"}),
        json!({"output": {"type": "tool", "content": "done", "tool_call_id": "c1"}}),
        json!({"content": [{"type": "text", "text": "a"}], "isError": false}),
        json!({"type": "tool", "data": {"content": "x", "tool_call_id": "c2"}}),
    ] {
        assert_eq!(
            normalize_result(Payload::Text(value.to_string())),
            normalize_result(Payload::Json(value.clone())),
            "{value}"
        );
    }
}

#[test]
fn other_shapes_are_unchanged() {
    for p in [
        Payload::Text("plain".into()),
        Payload::Text(r#"{"output":"x","other":1}"#.into()),
        Payload::Json(json!({"result": "sunny"})),
        Payload::Json(json!([{"text": "Error"}])),
        Payload::Bytes(vec![0xff]),
    ] {
        assert_eq!(normalize_result(p.clone()), p);
    }
}
