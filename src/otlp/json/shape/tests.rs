use super::*;

fn limits(max_spans: usize, max_values: usize) -> ReadLimits {
    ReadLimits {
        max_spans,
        max_values,
    }
}

fn request(spans: &[&str]) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc"}}}}]}},"scopeSpans":[{{"scope":{{"name":"s"}},"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    )
}

#[test]
fn counts_spans_and_values_as_written() {
    let span = r#"{"name":"a","attributes":[{"key":"k","value":{"arrayValue":{"values":[{"intValue":1},{"kvlistValue":{"values":[{"key":"x"}]}}]}}},{"key":""}],"events":[{"name":"e","attributes":[{"key":"k"}]}],"links":[{"attributes":[]}],"status":{}}"#;
    let body = request(&[span, r#"{"name":"b"}"#]);
    let shape = scan(body.as_bytes(), ReadLimits::NONE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.spans, 2);
    // The resource attribute; span attributes 2, array elements 2, kvlist element 1, the
    // event 1 and its attribute 1, the link 1.
    assert_eq!(shape.values, 1 + 2 + 2 + 1 + 1 + 1 + 1);
    // root, resourceSpans, its object, scopeSpans, its object, spans, the span,
    // attributes, the KeyValue, value, arrayValue, values, the element, kvlistValue,
    // values, the KeyValue.
    assert_eq!(shape.depth, 16);
}

#[test]
fn structure_inside_strings_and_escaped_keys_are_read_as_serde_json_reads_them() {
    // Brackets and quotes inside strings are text; `"attr\u0069butes"` is `attributes`.
    let span =
        r#"{"name":"[{\"x\\","attr\u0069butes":[{"key":"]}"},{"key":"a"}],"values":[1, "2" ,[]]}"#;
    let shape = scan(request(&[span]).as_bytes(), ReadLimits::NONE);
    assert_eq!(
        shape.map(|s| (s.spans, s.values, s.depth)),
        Ok((1, 1 + 2 + 3, 9))
    );
}

#[test]
fn stops_at_the_first_cap() {
    // The resource attribute and three span attributes.
    let body = request(&[r#"{"attributes":[{},{},{}]}"#, "{}"]);
    assert_eq!(scan(body.as_bytes(), limits(2, 4)).map(|s| s.values), Ok(4));
    assert_eq!(
        scan(body.as_bytes(), limits(2, 3)),
        Err(ShapeError::TooManyValues { limit: 3 })
    );
    assert_eq!(
        scan(body.as_bytes(), limits(1, 100)),
        Err(ShapeError::TooManySpans { limit: 1 })
    );
}

fn nested(depth: usize) -> Vec<u8> {
    let mut body = vec![b'['; depth];
    body.extend(std::iter::repeat_n(b']', depth));
    body
}

#[test]
fn nesting_past_max_depth_is_refused_before_parsing_and_never_overflows() {
    assert_eq!(MAX_DEPTH, 201);
    let at_cap = nested(MAX_DEPTH);
    assert_eq!(
        scan(&at_cap, ReadLimits::NONE).map(|s| s.depth),
        Ok(MAX_DEPTH)
    );
    // serde_json's own limit is 128: read past it up to the cap, on a test thread's stack.
    assert!(parse(&at_cap).is_ok());
    for depth in [MAX_DEPTH + 1, 100_000] {
        assert_eq!(
            scan(&nested(depth), ReadLimits::NONE),
            Err(ShapeError::TooDeep { limit: MAX_DEPTH })
        );
        let err = parse(&nested(depth)).err().unwrap_or_default();
        assert!(err.contains("nested deeper than 201 levels"), "{err}");
    }
    // Unclosed, or opened inside what serde_json refuses: the scan still bounds it.
    assert!(parse(&vec![b'{'; 100_000]).is_err());
    assert!(parse(b"[1, 2").is_err());
}

#[test]
fn the_cost_grows_with_what_decoding_builds_not_with_the_text() {
    // Ten bytes of text per empty attribute, each decoded to a map node of ~650 bytes.
    let n = 10_000;
    let attributes = vec![r#"{"key":""}"#; n].join(",");
    let body = request(&[&format!(r#"{{"attributes":[{attributes}]}}"#)]);
    let shape = scan(body.as_bytes(), ReadLimits::NONE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.values, n + 1);
    assert!(
        shape.decoded_bytes > n * MAP_LEAF_BYTES,
        "{} for {} bytes",
        shape.decoded_bytes,
        body.len()
    );
    assert!(shape.decoded_bytes < n * 2 * MAP_LEAF_BYTES);
}
