//! What decoding an OTLP/JSON body takes at its peak, measured with the counting allocator
//! of `run_memory.rs`, against what the OTLP/HTTP receiver counts it at before parsing it
//! (`otlp::json::shape`): the count must never be lower, whatever the body's shape (issue
//! 31 item 1; a body of 1.2 M empty attributes once took ~850 MB while it was counted at
//! 6× its 13 MB), nor much higher on ordinary requests.

use loopwatch::otlp::wire::ReadLimits;
use loopwatch::receiver::decode::check_json_shape;
use loopwatch::receiver::partial::decode_json_partial;

use super::run_memory::peak_during;

fn request(spans: &str, extra: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc"}}}}]}},"scopeSpans":[{{"scope":{{"name":"s"}},"spans":[{spans}]}}]}}]{extra}}}"#
    )
}

fn repeat(item: impl Fn(usize) -> String, n: usize) -> String {
    (0..n).map(item).collect::<Vec<_>>().join(",")
}

/// A GenAI tool span as OTLP/JSON exporters write it.
fn tool_span(i: usize) -> String {
    format!(
        r#"{{"traceId":"{:032x}","spanId":"{:016x}","parentSpanId":"{:016x}","name":"execute_tool read_file","kind":1,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000500000000","attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},{{"key":"gen_ai.tool.name","value":{{"stringValue":"read_file"}}}},{{"key":"gen_ai.tool.call.id","value":{{"stringValue":"call_{i}"}}}},{{"key":"gen_ai.tool.call.arguments","value":{{"stringValue":"{{\"path\": \"src/file_{i}.rs\", \"limit\": 100}}"}}}},{{"key":"tokens","value":{{"intValue":"{i}"}}}},{{"key":"tags","value":{{"arrayValue":{{"values":[{{"stringValue":"a"}},{{"stringValue":"b"}}]}}}}}}],"events":[{{"name":"gen_ai.tool.message","attributes":[{{"key":"content","value":{{"stringValue":"ok"}}}}]}}],"status":{{"code":1}}}}"#,
        1,
        i + 1,
        1
    )
}

/// Bodies of each shape the count must cover: a decoded-cost bomb of each kind (tiny text
/// per JSON object or array element, attributes with and without a key, unknown fields
/// the decoder drops after parsing them), ordinary tool spans, and a request read by the
/// lenient path (a span with a short id).
fn bodies() -> Vec<(&'static str, String)> {
    let n = 50_000;
    vec![
        (
            "empty attributes",
            request(
                &format!(
                    r#"{{"attributes":[{}]}}"#,
                    repeat(|_| r#"{"key":""}"#.into(), n)
                ),
                "",
            ),
        ),
        (
            "attributes without a key",
            request(
                &format!(r#"{{"attributes":[{}]}}"#, repeat(|_| "{}".into(), n)),
                "",
            ),
        ),
        ("empty spans", request(&repeat(|_| "{}".into(), n), "")),
        (
            "unknown objects",
            request(
                "",
                &format!(r#","x":[{}]"#, repeat(|_| r#"{"":0}"#.into(), n)),
            ),
        ),
        (
            "unknown numbers",
            request("", &format!(r#","x":[{}]"#, repeat(|_| "1".into(), n))),
        ),
        (
            "nested arrays",
            request(
                &format!(
                    r#"{{"attributes":[{{"key":"a","value":{{"arrayValue":{{"values":[{}]}}}}}}]}}"#,
                    repeat(|_| r#"{"arrayValue":{}}"#.into(), n)
                ),
                "",
            ),
        ),
        ("tool spans", request(&repeat(tool_span, 2_000), "")),
        (
            "tool spans, one unreadable",
            request(
                &format!(
                    r#"{},{{"name":"short","traceId":"0102"}}"#,
                    repeat(tool_span, 2_000)
                ),
                "",
            ),
        ),
    ]
}

#[test]
fn the_count_of_a_json_body_covers_its_decoding_peak() {
    for (name, body) in bodies() {
        let shape = check_json_shape(body.as_bytes(), ReadLimits::NONE)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (decoded, peak) = peak_during(|| decode_json_partial(body.as_bytes()).map(|_| ()));
        decoded.unwrap_or_else(|e| panic!("{name}: {e}"));
        let counted = shape.decoded_bytes;
        eprintln!(
            "{name}: {} B of text, decoding peak {peak} B ({:.1}× the text), counted {counted} B ({:.2}× the peak)",
            body.len(),
            peak as f64 / body.len() as f64,
            counted as f64 / peak as f64
        );
        assert!(counted >= peak, "{name}: counted {counted} < peak {peak}");
        assert!(
            counted <= 4 * peak,
            "{name}: counted {counted}, over 4× the peak {peak}"
        );
    }
}
