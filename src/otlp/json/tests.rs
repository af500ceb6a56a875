use super::*;
use serde_json::json;

#[test]
fn proto_names_and_enum_names_become_canonical() {
    let mut v = json!({"resource_spans":[{"scope_spans":[{"spans":[{
        "trace_id":"0102","kind":"SPAN_KIND_SERVER",
        "status":{"code":"STATUS_CODE_ERROR","message":"x"},
        "attributes":[{"key":"a","value":{"kvlist_value":{"values":[{"key":"b","value":{"int_value":"7"}}]}}}]
    }]}]}]});
    let unknown = normalize(&mut v).expect("an OTLP object").unknown;
    assert_eq!(unknown, UnknownFields::default());
    assert_eq!(
        v,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{
            "traceId":"0102","kind":2,
            "status":{"code":2,"message":"x"},
            "attributes":[{"key":"a","value":{"kvlistValue":{"values":[{"key":"b","value":{"intValue":"7"}}]}}}]
        }]}]}]})
    );
}

#[test]
fn unknown_fields_are_removed_and_counted_with_the_first_path() {
    let mut v = json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"a","foo":1,"bar":{}}]}]}],"extra":true});
    let unknown = normalize(&mut v).expect("an OTLP object").unknown;
    assert_eq!(unknown.count, 3);
    assert_eq!(
        v,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"a"}]}]}]})
    );
    let mut one = json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"a","foo":1}]}]}]});
    let unknown = normalize(&mut one).expect("an OTLP object").unknown;
    assert_eq!(
        unknown.first.as_deref(),
        Some("resourceSpans[0].scopeSpans[0].spans[0].foo")
    );
}

#[test]
fn instrumentation_library_spans_are_read_as_scope_spans() {
    // OTLP ≤ 0.18 JSON (opentelemetry-proto v0.9–v0.18, Collector file exports of 2021).
    let old = json!({"resourceSpans":[{
        "resource":{"attributes":[]},
        "instrumentationLibrarySpans":[{
            "instrumentationLibrary":{"name":"agent","version":"0.1"},
            "spans":[{"name":"a","kind":"SPAN_KIND_INTERNAL"}]
        }]
    }]});
    let new = json!({"resourceSpans":[{
        "resource":{"attributes":[]},
        "scopeSpans":[{
            "scope":{"name":"agent","version":"0.1"},
            "spans":[{"name":"a","kind":1}]
        }]
    }]});
    for mut v in [
        old.clone(),
        json!({"resource_spans":[{"instrumentation_library_spans":[{
            "instrumentation_library":{"name":"agent","version":"0.1"},
            "spans":[{"name":"a","kind":1}]}],
            "resource":{"attributes":[]}}]}),
    ] {
        assert_eq!(normalize(&mut v), Ok(Normalized::default()));
        assert_eq!(v, new);
    }
    // A sender writing both names: the current one wins, nothing is read twice.
    let mut both = json!({"resourceSpans":[{
        "scopeSpans":[{"spans":[{"name":"new"}]}],
        "instrumentationLibrarySpans":[{"spans":[{"name":"old"}]}]
    }]});
    normalize(&mut both).expect("an OTLP object");
    assert_eq!(
        both,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"new"}]}]}]})
    );
    // An empty current field does not hide the old one.
    let mut empty = json!({"resourceSpans":[{
        "instrumentationLibrarySpans":[{"spans":[{"name":"old"}]}],
        "scopeSpans":[]
    }]});
    normalize(&mut empty).expect("an OTLP object");
    assert_eq!(
        empty,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"old"}]}]}]})
    );
}

#[test]
fn fields_a_protojson_writer_leaves_out_or_writes_null_are_their_defaults() {
    let mut v = json!({"resourceSpans":[{"scopeSpans":[{"spans":[{
        "startTimeUnixNano": null,
        "attributes":[
            {"key":"empty_list","value":{"arrayValue":{}}},
            {"key":"empty_map","value":{"kvlistValue":{}}},
            {"key":"nested","value":{"arrayValue":{"values":[{"kvlistValue":{}}]}}},
            {"value":{"stringValue":"no key"}},
            {"key":"null_value","value":null}
        ]
    }]}]}]});
    assert_eq!(normalize(&mut v), Ok(Normalized::default()));
    assert_eq!(
        v,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{
            "attributes":[
                {"key":"empty_list","value":{"arrayValue":{"values":[]}}},
                {"key":"empty_map","value":{"kvlistValue":{"values":[]}}},
                {"key":"nested","value":{"arrayValue":{"values":[{"kvlistValue":{"values":[]}}]}}},
                {"key":"","value":{"stringValue":"no key"}},
                {"key":"null_value"}
            ]
        }]}]}]})
    );
    let request: crate::otlp::ExportTraceServiceRequest =
        serde_json::from_value(v).expect("the typed decoder reads it");
    let span = &request.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(span.attributes.len(), 5);
    assert_eq!(span.start_time_unix_nano, 0);
}

#[test]
fn numbers_in_strings_become_numbers_and_non_finite_doubles_are_counted() {
    let mut v = json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[
        {"key":"a","value":{"doubleValue":"1.5"}},
        {"key":"b","value":{"double_value":"NaN"}},
        {"key":"c","value":{"arrayValue":{"values":[{"doubleValue":"-Infinity"},{"doubleValue":"-2e3"}]}}},
        {"key":"d","value":{"doubleValue":"one"}}
    ]}]}]}]});
    let normalized = normalize(&mut v).expect("an OTLP object");
    assert_eq!(normalized.non_finite_doubles, 2);
    assert_eq!(
        v,
        json!({"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[
            {"key":"a","value":{"doubleValue":1.5}},
            {"key":"b","value":{"doubleValue":"NaN"}},
            {"key":"c","value":{"arrayValue":{"values":[{"doubleValue":"-Infinity"},{"doubleValue":-2000.0}]}}},
            {"key":"d","value":{"doubleValue":"one"}}
        ]}]}]}]})
    );
}

/// The double of every attribute of `request`, at any depth, in order.
fn doubles_of(request: &crate::otlp::ExportTraceServiceRequest) -> Vec<f64> {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value as V, AnyValue, KeyValue};
    fn any(value: &AnyValue, out: &mut Vec<f64>) {
        match &value.value {
            Some(V::DoubleValue(d)) => out.push(*d),
            Some(V::ArrayValue(a)) => a.values.iter().for_each(|v| any(v, out)),
            Some(V::KvlistValue(kv)) => kvs(&kv.values, out),
            _ => {}
        }
    }
    fn kvs(list: &[KeyValue], out: &mut Vec<f64>) {
        for kv in list {
            if let Some(value) = &kv.value {
                any(value, out);
            }
        }
    }
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        kvs(
            &rs.resource.clone().unwrap_or_default().attributes,
            &mut out,
        );
        for ss in &rs.scope_spans {
            kvs(&ss.scope.clone().unwrap_or_default().attributes, &mut out);
            for span in &ss.spans {
                kvs(&span.attributes, &mut out);
                for event in &span.events {
                    kvs(&event.attributes, &mut out);
                }
                for link in &span.links {
                    kvs(&link.attributes, &mut out);
                }
            }
        }
    }
    out
}

#[test]
fn non_finite_doubles_decode_at_every_depth_and_spelling() {
    // As Go's protojson and the Collector (pdata `Stream.WriteFloat64`) write them, in
    // every place the trace schema has an AnyValue, under both field spellings and the
    // OTLP ≤ 0.18 names.
    let body = br#"{"resource_spans":[
      {"resource":{"attributes":[{"key":"r","value":{"doubleValue":"Infinity"}}]},
       "instrumentationLibrarySpans":[{
         "instrumentationLibrary":{"name":"old","attributes":[{"key":"s","value":{"doubleValue":"-Infinity"}}]},
         "spans":[{"name":"legacy","attributes":[{"key":"n","value":{"doubleValue":"NaN"}}]}]}]},
      {"scopeSpans":[{"spans":[{
         "name":"t",
         "attributes":[
           {"key":"plain","value":{"doubleValue":2.5}},
           {"key":"string","value":{"doubleValue":"1.5"}},
           {"key":"nan","value":{"double_value":"NaN"}},
           {"key":"list","value":{"arrayValue":{"values":[{"doubleValue":"Infinity"},{"kvlistValue":{"values":[{"key":"deep","value":{"doubleValue":"-Infinity"}}]}}]}}},
           {"key":"map","value":{"kvlist_value":{"values":[{"key":"x","value":{"doubleValue":"NaN"}},{"key":"y","value":{"doubleValue":"-0"}}]}}}
         ],
         "events":[{"name":"e","attributes":[{"key":"ev","value":{"doubleValue":"Infinity"}}]}],
         "links":[{"attributes":[{"key":"lk","value":{"doubleValue":"-Infinity"}}]}]
      }]}]}
    ]}"#;
    let mut value: Value = serde_json::from_slice(body).expect("JSON");
    let normalized = normalize(&mut value).expect("an OTLP object");
    assert_eq!(normalized.non_finite_doubles, 9);
    let taken = doubles::NonFinite::take(&mut value);
    let mut request: crate::otlp::ExportTraceServiceRequest =
        serde_json::from_value(value).expect("the typed decoder reads the rest");
    taken.restore(&mut request);
    let got = doubles_of(&request);
    let inf = f64::INFINITY;
    let expected = [
        inf,
        -inf,
        f64::NAN,
        2.5,
        1.5,
        f64::NAN,
        inf,
        -inf,
        f64::NAN,
        -0.0,
        inf,
        -inf,
    ];
    assert_eq!(got.len(), expected.len(), "{got:?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
            "{got:?}"
        );
    }
    // The protobuf forwarded carries them (prost encodes NaN and infinities as doubles).
    use prost::Message;
    let again = crate::otlp::ExportTraceServiceRequest::decode(request.encode_to_vec().as_slice())
        .expect("re-decodes");
    assert_eq!(doubles_of(&again).len(), expected.len());
    assert!(doubles_of(&again)[2].is_nan());
}

#[test]
fn unknown_field_log_counts_every_field() {
    let log = UnknownFieldLog::default();
    let unknown = UnknownFields {
        count: 2,
        first: Some("foo".into()),
    };
    log.record("otel-go/1.0", &unknown);
    log.record("otel-go/1.0", &unknown);
    log.record("other", &UnknownFields::default());
    assert_eq!(log.total(), 4);
    assert_eq!(log.warned.lock().map(|w| w.len()).ok(), Some(1));
}

#[test]
fn bodies_without_an_otlp_object_are_refused() {
    assert_eq!(
        normalize(&mut json!({"foo": 1})),
        Err(NotOtlp::NoOtlpField("foo".into()))
    );
    assert_eq!(normalize(&mut json!([1, 2])), Err(NotOtlp::NotAnObject));
    assert_eq!(normalize(&mut json!({})), Ok(Normalized::default()));
}
