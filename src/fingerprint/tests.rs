use super::*;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use serde_json::{json, Value};

fn call(args: Payload) -> Fingerprint {
    Fingerprinter::default().call_fingerprint("read_file", &args)
}

fn text(s: &str) -> Payload {
    Payload::Text(s.to_string())
}

#[test]
fn json_string_object_and_bytes_are_one_value() {
    let object = call(Payload::Json(json!({"path": "a.txt", "n": 1})));
    assert_eq!(object, call(text(r#"{"n": 1, "path": "a.txt"}"#)));
    assert_eq!(
        object,
        call(Payload::Bytes(br#"{"path":"a.txt","n":1.0}"#.to_vec()))
    );
    // one further level of string-wrapped JSON is unwrapped
    assert_eq!(object, call(text(r#""{\"path\": \"a.txt\", \"n\": 1}""#)));
    assert_ne!(object, call(text(r#"{"path": "b.txt", "n": 1}"#)));
}

#[test]
fn canonical_form_is_jcs() {
    let fp = Fingerprinter::default();
    let keys = HashSet::new();
    let bytes = fp.canonical_bytes(&text(r#"{"b": [1e0, 2.50], "a": "é"}"#), &keys);
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        r#"{"a":"é","b":[1,2.5]}"#
    );
}

#[test]
fn call_fingerprint_is_sha256_of_tool_nul_canonical() {
    let got = call(Payload::Json(json!({"b": 1, "a": 2})));
    let want: Fingerprint = Sha256::digest(b"read_file\0{\"a\":2,\"b\":1}").into();
    assert_eq!(got, want);
    let other = Fingerprinter::default().call_fingerprint("write_file", &text(r#"{"a":2,"b":1}"#));
    assert_ne!(got, other);
}

#[test]
fn number_spelling_does_not_matter() {
    let one = call(text("[1]"));
    assert_eq!(one, call(text("[1.0]")));
    assert_eq!(one, call(text("[1e0]")));
    assert_eq!(one, call(text("[10E-1]")));
    assert_ne!(one, call(text("[2]")));
}

#[test]
fn big_integers_do_not_collide() {
    let a = call(text(r#"{"id": 9007199254740993}"#));
    let b = call(text(r#"{"id": 9007199254740992}"#));
    assert_ne!(a, b);
    assert_ne!(
        call(text("-9007199254740993")),
        call(text("-9007199254740992"))
    );
    // a big integer is not the string of its digits, nor the double of its value
    assert_ne!(b, call(text(r#"{"id": "n9007199254740992"}"#)));
    assert_ne!(b, call(text(r#"{"id": 9007199254740992.0}"#)));
    assert_eq!(a, call(Payload::Json(json!({"id": 9007199254740993u64}))));
    // below 2^53 an integer is its double
    assert_eq!(
        call(text("9007199254740991")),
        call(text("9007199254740991.0"))
    );
}

#[test]
fn types_and_array_order_matter() {
    assert_ne!(
        call(Payload::Json(json!(1))),
        call(Payload::Json(json!("1")))
    );
    assert_ne!(call(text(r#"{"a": 1}"#)), call(text(r#"{"a": "1"}"#)));
    assert_ne!(call(text("[1, 2]")), call(text("[2, 1]")));
    assert_ne!(call(text(r#"{"a": null}"#)), call(text("{}")));
}

#[test]
fn volatile_keys_ignored_at_any_depth() {
    let base = call(text(r#"{"q": {"x": [ {"y": 1} ]}}"#));
    let noisy = r#"{"timestamp": 5, "q": {"request_id": "r", "x": [ {"y": 1, "nonce": 7} ]}}"#;
    assert_eq!(base, call(text(noisy)));
    // results have their own set: `timestamp` stays, `tool_call_id` goes
    let fp = Fingerprinter::default();
    let ok = CallStatus::Ok;
    let r1 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "tool_call_id": "a"}"#)));
    let r2 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "tool_call_id": "b"}"#)));
    assert_eq!(r1, r2);
    let t1 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "timestamp": 1}"#)));
    let t2 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "timestamp": 2}"#)));
    assert_ne!(t1, t2);
}

#[test]
fn per_tool_volatile_keys() {
    let mut config = FingerprintConfig::default();
    config
        .tool_volatile_keys
        .insert("search".into(), vec!["page_token".into()]);
    let fp = Fingerprinter::new(&config);
    let a = fp.call_fingerprint("search", &text(r#"{"q": "x", "page_token": 1}"#));
    let b = fp.call_fingerprint(
        "search",
        &text(r#"{"q": "x", "page_token": 2, "nonce": 3}"#),
    );
    assert_eq!(a, b);
    let c = fp.call_fingerprint("other", &text(r#"{"q": "x", "page_token": 1}"#));
    let d = fp.call_fingerprint("other", &text(r#"{"q": "x", "page_token": 2}"#));
    assert_ne!(c, d);
}

#[test]
fn unparsable_text_is_the_string_it_spells() {
    let fp = Fingerprinter::default();
    let keys = HashSet::new();
    let canonical = fp.canonical_bytes(&text("not json {"), &keys);
    assert_eq!(canonical, br#""not json {""#.to_vec());
    // reference `_decode`: `abc` and the JSON string `"abc"` are one value
    assert_eq!(call(text("abc")), call(text(r#""abc""#)));
    assert_ne!(call(text("abc")), call(text("abd")));
    assert_ne!(call(text("not json {")), call(text("not json  {")));
    assert_eq!(
        call(text("bare value")),
        call(Payload::Bytes(b"bare value".to_vec()))
    );
    assert_ne!(
        call(Payload::Bytes(vec![0xff, 0xfe])),
        call(Payload::Bytes(vec![0xff]))
    );
}

#[test]
fn deep_nesting_hashes_raw_without_overflow() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let a = call(text(&deep));
    let shallower = format!("{}{}", "[".repeat(9_999), "]".repeat(9_999));
    assert_ne!(a, call(text(&shallower)));
    // a structured value of that depth: walked without recursion
    let mut value = Value::Array(vec![]);
    for _ in 1..10_000 {
        value = Value::Array(vec![value]);
    }
    let payload = Payload::Json(value);
    let fp = Fingerprinter::default();
    let b = fp.call_fingerprint("read_file", &payload);
    assert_eq!(b, fp.call_fingerprint("read_file", &payload));
    assert!(fp
        .canonical_bytes(&payload, &HashSet::new())
        .starts_with(RAW_TAG));
    // deep text does not parse (serde_json stops at 128 levels): it is the string
    // it spells, which differs from the raw-tagged structured value
    assert_ne!(a, b);
    // dropping a 10 000-deep serde_json::Value recurses; leak the test's copy instead
    std::mem::forget(payload);
    // beyond max_depth (64) but parsable: raw, distinct from the canonical form
    let fp = Fingerprinter::default();
    let nested = format!("{}{}", "[".repeat(70), "]".repeat(70));
    assert!(fp
        .canonical_bytes(&text(&nested), &HashSet::new())
        .starts_with(RAW_TAG));
}

#[test]
fn oversized_arguments_hash_raw() {
    let big = format!(r#"{{"data": "{}"}}"#, "x".repeat(2 * 1024 * 1024));
    let fp = Fingerprinter::default();
    assert!(fp
        .canonical_bytes(&text(&big), &HashSet::new())
        .starts_with(RAW_TAG));
    let mut other = big.clone();
    other.replace_range(10..11, "y");
    assert_ne!(call(text(&big)), call(text(&other)));
    let json = Payload::Json(json!({"data": "x".repeat(2 * 1024 * 1024)}));
    assert!(fp
        .canonical_bytes(&json, &HashSet::new())
        .starts_with(RAW_TAG));
}

#[test]
fn result_fingerprints_follow_reference_rfp() {
    let fp = Fingerprinter::default();
    let err = CallStatus::Error {
        message: "boom".into(),
    };
    let want: Fingerprint = Sha256::digest(b"error\0boom").into();
    assert_eq!(fp.result_fingerprint(&err, None), Some(want));
    assert_eq!(
        fp.result_fingerprint(&err, Some(&text("anything"))),
        Some(want)
    );
    assert_eq!(fp.result_fingerprint(&CallStatus::Ok, None), None);
    let null: Fingerprint = Sha256::digest(b"ok\0null").into();
    assert_eq!(
        fp.result_fingerprint(&CallStatus::Ok, Some(&Payload::Json(Value::Null))),
        Some(null)
    );
    // an ok result that is the error message's text is not the error
    assert_ne!(
        fp.result_fingerprint(&CallStatus::Ok, Some(&text("boom"))),
        Some(want)
    );
}

#[test]
fn normalize_text_matches_reference() {
    assert_eq!(normalize_text("  Hello\t\n  WORLD  "), "hello world");
    assert_eq!(normalize_text("a\u{1f}b\u{a0}c"), "a b c");
    assert_eq!(normalize_text(""), "");
    assert_eq!(normalize_text("   "), "");
}

#[test]
fn remembered_short_forms_are_never_another_keys_or_fingerprints() {
    // Twelve fingerprints (more than are remembered) under two keys of equal bytes
    // and one of other bytes, asked for in an order that revisits each.
    let keys = [
        FingerprintKey::new(b"secret"),
        FingerprintKey::new(b"secret"),
        FingerprintKey::new(b"other"),
    ];
    let fps: Vec<Fingerprint> = (0..12u8).map(|i| call(text(&format!("[{i}]")))).collect();
    for round in 0..3 {
        for (i, fp) in fps.iter().enumerate() {
            for key in &keys {
                let expected = &key.hex(fp)[..16];
                assert_eq!(key.short(fp), expected, "round {round}, fingerprint {i}");
                assert_eq!(key.short_compact(fp), expected);
                assert_eq!(key.clone().short(fp), expected);
            }
            assert_eq!(keys[0].short(fp), keys[1].short(fp));
            assert_ne!(keys[0].short(fp), keys[2].short(fp));
        }
    }
}

#[test]
fn external_form_is_keyed_hmac() {
    let key = FingerprintKey::new(b"secret");
    let fp = call(text("{}"));
    let hex = key.hex(&fp);
    assert_eq!(hex.len(), 64);
    assert!(hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(key.short(&fp), hex[..16]);
    assert_eq!(key.short_compact(&fp), hex[..16]);
    let mut manual = <Hmac<Sha256> as Mac>::new_from_slice(b"secret").unwrap();
    manual.update(&fp);
    assert_eq!(hex, hex::encode(manual.finalize().into_bytes()));
    assert_ne!(hex, FingerprintKey::new(b"other").hex(&fp));
    assert_ne!(hex, FingerprintKey::random().hex(&fp));
    assert_ne!(hex, hex::encode(fp));
    // RFC 4231 test case 2
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
    mac.update(b"what do ya want for nothing?");
    assert_eq!(
        hex::encode(mac.finalize().into_bytes()),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert!(!format!("{key:?}").contains("secret"));
}

/// Arbitrary JSON values (no big integers: those are covered above).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1000i64..1000).prop_map(|n| json!(n)),
        (-1000.0f64..1000.0).prop_map(|f| json!(f)),
        "[a-z\u{e9}\u{1F600} ]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Writes `value` as JSON with object keys in reverse order and integral numbers
/// spelled as floats (`2` → `2.0`).
fn respell(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}: {}", json!(k), respell(v)))
                .collect();
            format!("{{ {} }}", parts.join(" , "))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(respell).collect::<Vec<_>>().join(", ")
            )
        }
        Value::Number(n) if n.is_i64() => format!("{n}.0"),
        Value::Number(n) => n.as_f64().map(|f| format!("{f:e}")).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// Inserts volatile keys into every object of `value`.
fn add_volatile(value: &Value, salt: u32) -> Value {
    match value {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), add_volatile(v, salt)))
                .collect();
            out.insert("timestamp".into(), json!(salt));
            out.insert("request_id".into(), json!(format!("req-{salt}")));
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| add_volatile(v, salt)).collect()),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn key_order_and_number_spelling_never_change_it(value in json_value()) {
        let direct = call(Payload::Json(value.clone()));
        prop_assert_eq!(direct, call(Payload::Text(respell(&value))));
    }

    #[test]
    fn string_object_and_bytes_agree(value in json_value()) {
        let encoded = value.to_string();
        let direct = call(Payload::Json(value.clone()));
        prop_assert_eq!(direct, call(Payload::Text(encoded.clone())));
        prop_assert_eq!(direct, call(Payload::Bytes(encoded.into_bytes())));
    }

    #[test]
    fn volatile_keys_never_change_it(value in json_value(), salt in any::<u32>()) {
        let noisy = add_volatile(&value, salt);
        prop_assert_eq!(call(Payload::Json(value)), call(Payload::Json(noisy)));
    }

    #[test]
    fn big_integers_are_exact(a in (1u64 << 53)..u64::MAX, b in (1u64 << 53)..u64::MAX) {
        let fa = call(Payload::Text(format!("[{a}]")));
        let fb = call(Payload::Text(format!("[{b}]")));
        prop_assert_eq!(a == b, fa == fb);
    }

    #[test]
    fn arbitrary_text_never_panics(s in ".{0,64}") {
        let _ = call(Payload::Text(s.clone()));
        prop_assert_eq!(normalize_text(&normalize_text(&s)), normalize_text(&s));
    }
}
