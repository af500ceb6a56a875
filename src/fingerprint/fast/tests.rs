use super::scalars::written_canonically;
use super::*;

fn limits() -> Limits {
    Limits {
        max_depth: 64,
        max_bytes: 1024 * 1024,
    }
}

fn drop() -> HashSet<String> {
    ["timestamp", "nonce"]
        .iter()
        .map(|k| k.to_string())
        .collect()
}

#[test]
fn few_and_many_volatile_keys_drop_the_same_members() {
    let text = r#"{"nonce":1,"k3":{"k19":2,"kept":3,"ünï":4},"k":5}"#;
    let keep = r#"{"k":5,"k3":{"kept":3}}"#;
    for count in [3, FEW_VOLATILE_KEYS, FEW_VOLATILE_KEYS + 1, 40] {
        let mut keys: HashSet<String> = (0..count - 2).map(|i| format!("k{i}")).collect();
        keys.remove("k3");
        keys.extend(["nonce".to_string(), "ünï".to_string()]);
        assert_eq!(
            Volatile::new(&keys).few.is_some(),
            keys.len() <= FEW_VOLATILE_KEYS
        );
        let mut scratch = Scratch::default();
        let bytes = canonical_text(text, &keys, limits(), &mut scratch).map(<[u8]>::to_vec);
        let expected = if keys.contains("k19") {
            keep
        } else {
            r#"{"k":5,"k3":{"k19":2,"kept":3}}"#
        };
        assert_eq!(bytes.as_deref(), Some(expected.as_bytes()), "{count} keys");
    }
}

/// The one-pass result, as text; `None` when it leaves the text to the tree path.
fn fast(text: &str) -> Option<String> {
    let mut scratch = Scratch::default();
    let bytes = canonical_text(text, &drop(), limits(), &mut scratch)?;
    Some(String::from_utf8(bytes.to_vec()).unwrap())
}

#[test]
fn common_shapes_are_written_in_one_pass() {
    let cases = [
        (
            r#"{"b": 1, "a": [true, null, -0, 2.50, 1e2]}"#,
            r#"{"a":[true,null,0,2.5,100],"b":1}"#,
        ),
        (
            r#"{"q": {"nonce": 7, "z": "x", "timestamp": {"a": 1}}}"#,
            r#"{"q":{"z":"x"}}"#,
        ),
        (
            r#"{"t": "a\"b\\c\/\n\u00e9\u0001\ud83d\ude00"}"#,
            "{\"t\":\"a\\\"b\\\\c/\\n\u{e9}\\u0001\u{1f600}\"}",
        ),
        (
            "{\"é\": 1, \"z\": 2, \"\u{e000}\": 3}",
            "{\"z\":2,\"é\":1,\"\u{e000}\":3}",
        ),
        (
            "{\"\u{e000}\": 1, \"\u{1f600}\": 2}",
            "{\"\u{1f600}\":2,\"\u{e000}\":1}",
        ),
        (
            r#"  [0.1, 1e-7, 5e-324, 123456789012345, -1.5E+300] "#,
            "[0.1,1e-7,5e-324,123456789012345,-1.5e+300]",
        ),
        (r#""{\"b\": 2, \"a\": 1}""#, r#"{"a":1,"b":2}"#),
        (r#""plain words""#, r#""plain words""#),
        ("some words {", r#""some words {""#),
        ("", r#""""#),
        ("Tab\t\u{1}", "\"Tab\\t\\u0001\""),
    ];
    for (text, want) in cases {
        assert_eq!(fast(text).as_deref(), Some(want), "{text}");
    }
}

#[test]
fn anything_unsure_is_left_to_the_tree_path() {
    for text in [
        r#"{"a": 1, "a": 2}"#,
        r#"{"b": 1, "a": 2, "b": 3}"#,
        r#"{"id": 9007199254740993}"#,
        "1234567890123456",
        r#"{"a\n": 1}"#,
        "1e400",
        "1e-400",
        "1e0001",
        r#"["\ud800"]"#,
        r#"["\udc00x"]"#,
        "[1, 2] x",
        "[1,]",
        "01",
        "{\"a\": \"\u{1}\"}",
        "true story",
        "not json",
        r#""\"{\\\"a\\\":1}\"" x"#,
    ] {
        assert_eq!(fast(text), None, "{text}");
    }
    let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
    assert_eq!(fast(&deep), None);
    let small = Limits {
        max_depth: 64,
        max_bytes: 30,
    };
    // the size estimate counts 24 per number: three are over 30 bytes
    let mut scratch = Scratch::default();
    assert!(canonical_text("[1,2,3]", &drop(), small, &mut scratch).is_none());
    assert!(canonical_text("[1]", &drop(), small, &mut scratch).is_some());
}

proptest::proptest! {
    #[test]
    fn decimals_kept_as_written_are_what_formatting_writes(
        negative: bool,
        int in "0|[1-9][0-9]{0,16}",
        fraction in "[0-9]{1,20}",
    ) {
        let spelled = format!("{}{int}.{fraction}", if negative { "-" } else { "" });
        let value: f64 = spelled.parse().unwrap();
        let formatted = ryu_js::Buffer::new().format_finite(value).to_string();
        let kept = written_canonically(int.as_bytes(), fraction.as_bytes());
        if kept {
            proptest::prop_assert_eq!(&formatted, &spelled);
        }
        // A short decimal written canonically is recognised as such.
        if formatted == spelled && fraction.len() + int.len() <= 12 {
            proptest::prop_assert!(kept, "{}", spelled);
        }
    }
}

#[test]
fn decimals_written_canonically() {
    for (text, kept) in [
        ("0.93", true),
        ("-12.5", true),
        ("0.000001", true),
        ("0.0000015", true),
        ("0.0000001", false),
        ("1.50", false),
        ("1.0", false),
        ("123456789012.345", true),
        ("1234567890123.456", false),
        ("0.1234567890123456", false),
    ] {
        let (int, fraction) = text.trim_start_matches('-').split_once('.').unwrap();
        assert_eq!(
            written_canonically(int.as_bytes(), fraction.as_bytes()),
            kept,
            "{text}"
        );
    }
    // Integers and exponents never reach it: they are written by their own rules.
    let mut scratch = Scratch::default();
    let written = canonical_text("[12, 1.5e3, 0.93]", &drop(), limits(), &mut scratch);
    assert_eq!(written, Some(&b"[12,1500,0.93]"[..]));
}
