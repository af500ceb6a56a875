//! The streaming canonical writer against the RFC 8785 crate (`reference.rs`): same bytes,
//! hence the same SHA-256 fingerprints, for arbitrary JSON text (number spellings, `\u`
//! escapes, surrogate pairs, duplicate keys, whitespace), strings that are JSON, volatile
//! keys at any depth, big integers, structured values and text that is not JSON.

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{reference, FingerprintConfig, Fingerprinter};
use crate::conventions::event::{CallStatus, Payload};

/// Keys the strategies draw from: volatile ones, and ones whose UTF-16 order differs from
/// their UTF-8 order (U+E000.. sorts after U+10000.. in UTF-8, before it in UTF-16... and
/// the reverse for surrogates), so key sorting is exercised.
const KEYS: &[&str] = &[
    "a",
    "b",
    "B",
    "aa",
    "é",
    "\u{e000}",
    "\u{ffff}",
    "\u{10000}",
    "\u{1f600}",
    "timestamp",
    "nonce",
    "request_id",
    "tool_call_id",
    "",
    "a\"b",
    "\n",
];

fn drop_set() -> HashSet<String> {
    ["timestamp", "nonce", "request_id", "tool_call_id"]
        .iter()
        .map(|k| k.to_string())
        .collect()
}

/// A string written as JSON text, each char spelled raw, as a short escape or as `\u`
/// (a surrogate pair beyond the BMP), by `style`.
fn spell_string(s: &str, style: &[u8]) -> String {
    let mut out = String::from("\"");
    for (i, c) in s.chars().enumerate() {
        let pick = style.get(i % style.len().max(1)).copied().unwrap_or(0) % 3;
        let must_escape = c == '"' || c == '\\' || (c as u32) < 0x20;
        match (pick, c) {
            (0, _) if !must_escape => out.push(c),
            (1, '"') => out.push_str("\\\""),
            (1, '\\') => out.push_str("\\\\"),
            (1, '\n') => out.push_str("\\n"),
            (1, '/') => out.push_str("\\/"),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out.push('"');
    out
}

fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(KEYS).prop_map(str::to_string),
        "[a-z\u{e9}\u{1F600}\u{e000} \"\\\\/\n\t\u{1}\u{7f}\u{2028}]{0,8}",
        any::<String>().prop_map(|s| s.chars().take(8).collect()),
    ]
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        (-1000i32..1000, -30i32..30).prop_map(|(m, e)| format!("{m}e{e}")),
        (-100i32..100, 0u32..1000).prop_map(|(i, f)| format!("{i}.{f:03}")),
        prop::sample::select(
            &[
                "-0",
                "0.0",
                "-0.0",
                "1E2",
                "1e-7",
                "9007199254740992",
                "9007199254740993",
                "-9007199254740993",
                "18446744073709551615",
                "18446744073709551616",
                "-9223372036854775808",
                "-9223372036854775809",
                "1e400",
                "5e-324",
                "0.1",
                "123456789012345678901234567890",
            ][..]
        )
        .prop_map(str::to_string),
    ]
}

/// Arbitrary JSON text (possibly invalid where a number is out of range), with whitespace,
/// escapes and duplicate keys.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        number_text(),
        (any_string(), prop::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(s, style)| spell_string(&s, &style)),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        let ws = prop::sample::select(&["", " ", "\n\t ", "\r\n"][..]);
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), ws.clone())
                .prop_map(|(items, ws)| format!("[{ws}{}{ws}]", items.join(&format!("{ws},")))),
            (
                prop::collection::vec(
                    (
                        any_string(),
                        prop::collection::vec(any::<u8>(), 1..3),
                        inner
                    ),
                    0..5
                ),
                ws
            )
                .prop_map(|(members, ws)| {
                    let members: Vec<String> = members
                        .iter()
                        .map(|(k, style, v)| format!("{}{ws}:{ws}{v}", spell_string(k, style)))
                        .collect();
                    format!("{{{ws}{}{ws}}}", members.join(","))
                }),
        ]
    })
}

fn both(payload: &Payload, fp: &Fingerprinter) -> (Vec<u8>, Vec<u8>) {
    let drop = drop_set();
    let streaming = fp.canonical_bytes(payload, &drop);
    let reference = reference::canonical_bytes(payload, &drop, fp.max_depth, fp.max_bytes);
    (streaming, reference)
}

fn assert_same(payload: &Payload, fp: &Fingerprinter) -> Result<(), TestCaseError> {
    let (streaming, reference) = both(payload, fp);
    prop_assert_eq!(
        String::from_utf8_lossy(&streaming),
        String::from_utf8_lossy(&reference),
        "payload {:?}",
        payload
    );
    prop_assert_eq!(&streaming, &reference);
    // and so the fingerprint is SHA-256(tool ‖ 0x00 ‖ the crate's canonical bytes)
    let mut want = Sha256::new();
    want.update(b"t\0");
    want.update(&reference);
    let want: [u8; 32] = want.finalize().into();
    prop_assert_eq!(fp.call_fingerprint_with("t", payload, &drop_set()), want);
    // the matching hash is XXH3-128 of the same bytes, and computing both gives both
    let drop = drop_set();
    let matching = super::MatchingKey::process().hash_of(&[b"t\0".as_slice(), &reference].concat());
    prop_assert_eq!(
        fp.call_match_normalized("t", payload, Some(&drop), |_| None),
        matching
    );
    prop_assert_eq!(
        fp.call_both_normalized("t", payload, Some(&drop), |_| None),
        (matching, want)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn streaming_text_equals_crate(text in json_text()) {
        let fp = Fingerprinter::default();
        assert_same(&Payload::Text(text.clone()), &fp)?;
        assert_same(&Payload::Bytes(text.clone().into_bytes()), &fp)?;
        // the same value as a string that is JSON (one level unwrapped), and two levels
        let wrapped = Value::String(text.clone()).to_string();
        assert_same(&Payload::Text(wrapped.clone()), &fp)?;
        assert_same(&Payload::Text(Value::String(wrapped).to_string()), &fp)?;
        // as a structured value, when it parses
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            assert_same(&Payload::Json(value), &fp)?;
        }
    }

    #[test]
    fn streaming_limits_equal_crate(text in json_text(), max_depth in 0usize..4, max_bytes in 0usize..200) {
        let fp = Fingerprinter::new(&FingerprintConfig {
            max_depth,
            max_bytes,
            ..FingerprintConfig::default()
        });
        assert_same(&Payload::Text(text.clone()), &fp)?;
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            assert_same(&Payload::Json(value), &fp)?;
        }
    }

    #[test]
    fn streaming_any_text_or_bytes_equals_crate(text in ".{0,40}", bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let fp = Fingerprinter::default();
        assert_same(&Payload::Text(text), &fp)?;
        assert_same(&Payload::Bytes(bytes), &fp)?;
    }

    #[test]
    fn streaming_results_equal_crate(text in json_text()) {
        let fp = Fingerprinter::default();
        let payload = Payload::Text(text);
        let reference = reference::canonical_bytes(
            &payload, &fp.result_volatile_keys, fp.max_depth, fp.max_bytes);
        let want: [u8; 32] = Sha256::digest([b"ok\0".as_slice(), &reference].concat()).into();
        prop_assert_eq!(fp.result_fingerprint(&CallStatus::Ok, Some(&payload)), Some(want));
        let matching = super::MatchingKey::process().hash_of(&[b"ok\0".as_slice(), &reference].concat());
        prop_assert_eq!(fp.result_match(&CallStatus::Ok, Some(&payload)), Some(matching));
        prop_assert_eq!(
            fp.result_both_with(&CallStatus::Ok, Some(&payload), &fp.result_volatile_keys),
            Some((matching, want))
        );
    }

    /// A JSON result told apart in the one-pass parse has the result fingerprint, and is
    /// told apart exactly for text holding an object or array that `serde_json` reads.
    #[test]
    fn json_results_are_told_apart_with_their_fingerprint(text in json_text()) {
        let fp = Fingerprinter::default();
        let payload = Payload::Text(text.clone());
        let container = super::opens_container(&text)
            && serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
        // `None` for a container is allowed (a shape left to the general path): the caller
        // then asks serde_json. `json_results_of_common_shapes_are_told_apart` checks that
        // common shapes are not left.
        if let Some(found) = fp.json_result_fingerprint(&text, None) {
            prop_assert!(container, "{:?}", text);
            prop_assert_eq!(Some(found), fp.result_fingerprint(&CallStatus::Ok, Some(&payload)));
        }
    }

    /// Matching hashes are equal exactly when the canonical bytes are: for two arbitrary
    /// texts, and for a text and other spellings of its value.
    #[test]
    fn matching_hash_equal_iff_canonical_bytes_equal(a in json_text(), b in json_text()) {
        let fp = Fingerprinter::default();
        let drop = drop_set();
        let wrapped = Value::String(a.clone()).to_string();
        let respelled = serde_json::from_str::<Value>(&a).ok().map(Payload::Json);
        let others = [Some(Payload::Text(b)), Some(Payload::Text(wrapped)), respelled];
        let a = Payload::Text(a);
        for other in others.into_iter().flatten() {
            let same_bytes = fp.canonical_bytes(&a, &drop) == fp.canonical_bytes(&other, &drop);
            let same_hash = fp.call_match_normalized("t", &a, Some(&drop), |_| None)
                == fp.call_match_normalized("t", &other, Some(&drop), |_| None);
            prop_assert_eq!(same_bytes, same_hash, "{:?} / {:?}", a, other);
        }
    }
}

#[test]
fn json_results_of_common_shapes_are_told_apart() {
    let fp = Fingerprinter::default();
    for text in [
        r#"{"hits": [{"path": "a.rs", "line": 3}], "total": 1}"#,
        " [1, \"two\", null, true, {\"x\": -0.5e3}]\n",
        r#"{"error": "Reservation not found", "request_id": "r-1"}"#,
    ] {
        let found = fp.json_result_fingerprint(text, None);
        assert!(found.is_some(), "{text}");
        let payload = Payload::Text(text.into());
        assert_eq!(
            found,
            fp.result_fingerprint(&CallStatus::Ok, Some(&payload))
        );
    }
    for text in [
        "[File: a.java (3 lines total)]",
        "[1, 2] x",
        "plain",
        "\"[1]\"",
        "{",
    ] {
        assert_eq!(fp.json_result_fingerprint(text, None), None, "{text}");
    }
}

#[test]
fn streaming_handles_known_shapes() {
    let fp = Fingerprinter::default();
    for text in [
        r#"{"b":1,"a":2,"a":3}"#,
        r#"{"\u00e9":1,"e":2,"\ud83d\ude00":3,"\ue000":4}"#,
        r#"{"id": 9007199254740993, "name": "x", "timestamp": 9007199254740993}"#,
        r#"{"n": 9007199254740993, "nonce": 1}"#,
        r#"{"timestamp": 9007199254740993, "v": "x"}"#,
        r#"[-0, 0.0, 1e21, 1e-7, 123456789012345680000, 5e-324, -1.5e300]"#,
        r#""{\"a\": [1, {\"nonce\": 2, \"b\": \"\\u0001\"}]}""#,
        r#""\"{\\\"a\\\":1}\"""#,
        "\"plain \\\"quoted\\\" text\"",
        "  [1, 2]  ",
        "[1, 2] x",
        "",
        "{\"a\":\"\u{7f}\u{2028}\\u001f\"}",
    ] {
        let (streaming, reference) = both(&Payload::Text(text.into()), &fp);
        assert_eq!(
            String::from_utf8_lossy(&streaming),
            String::from_utf8_lossy(&reference),
            "{text}"
        );
    }
}
