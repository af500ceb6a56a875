use super::*;
use crate::otlp::test_support::kv;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

#[test]
fn tokens_count_on_inference_spans_only() {
    let usage = vec![
        kv("gen_ai.usage.input_tokens", Value::IntValue(120)),
        kv(
            "gen_ai.usage.output_tokens",
            Value::StringValue("30".into()),
        ),
    ];
    let mut chat = otlp::Span {
        attributes: usage.clone(),
        ..Default::default()
    };
    chat.attributes.push(kv(
        "gen_ai.operation.name",
        Value::StringValue("chat".into()),
    ));
    assert_eq!(inference_tokens(&SpanView::from(&chat)), 150);
    let mut agent = otlp::Span {
        attributes: usage,
        ..Default::default()
    };
    agent.attributes.push(kv(
        "gen_ai.operation.name",
        Value::StringValue("invoke_agent".into()),
    ));
    assert_eq!(
        inference_tokens(&SpanView::from(&agent)),
        0,
        "agent totals would count twice"
    );
    let mut negative = chat.clone();
    negative.attributes[0] = kv("gen_ai.usage.input_tokens", Value::IntValue(-5));
    assert_eq!(inference_tokens(&SpanView::from(&negative)), 30);
}

#[test]
fn request_counts_reach_the_shared_counters() {
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    let engine = Engine::from_config(&crate::config::Config::default()).expect("default");
    let text = |s: &str| Value::StringValue(s.into());
    let tool = |trace: u8, id: u8| otlp::Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        attributes: vec![
            kv("gen_ai.operation.name", text("execute_tool")),
            kv("gen_ai.tool.name", text("search")),
            kv("gen_ai.tool.call.arguments", text(r#"{"q":1}"#)),
        ],
        ..Default::default()
    };
    let spans = vec![
        tool(1, 1),
        tool(1, 2),
        // A tool call without a valid trace_id (and no run-key attribute): no run.
        tool(0, 3),
        // Not an event at all.
        otlp::Span {
            trace_id: vec![1; 16],
            span_id: vec![4; 8],
            name: "plain".into(),
            ..Default::default()
        },
    ];
    let mut request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    for round in 1..=2 {
        engine.process(&mut request, Instant::now());
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(load(&engine.stats.spans_seen), 4 * round);
        assert_eq!(load(&engine.stats.tool_calls), 2 * round);
        assert_eq!(load(&engine.stats.spans_without_run), round);
        assert_eq!(load(&engine.stats.model_responses), 0);
    }
}
