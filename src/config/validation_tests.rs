use super::*;

fn error_of(toml: &str) -> Option<String> {
    Config::from_toml(toml).err().map(|e| e.to_string())
}

#[test]
fn a_key_inside_a_list_is_named_with_its_index_in_brackets() {
    let err = error_of("[[tools]]\nmatch = \"x\"\nwindw = 5\n").unwrap();
    assert!(
        err.starts_with("invalid configuration: tools[0].windw: unknown field `windw`"),
        "{err}"
    );
}

#[test]
fn an_unknown_profile_key_lists_extends_and_preset_among_the_keys() {
    let err = error_of("[profiles.nudge]\nwindw = 5\n").unwrap();
    assert!(
        err.contains("profiles.nudge.windw: unknown field `windw`"),
        "{err}"
    );
    assert!(err.contains("`window`"), "{err}");
    assert!(err.ends_with("`extends`, `preset`"), "{err}");
    let err = error_of("[receiver]\ngrpc_lisen = 1\n").unwrap();
    assert!(err.contains("unknown field `grpc_lisen`"), "{err}");
    assert!(!err.contains("`preset`"), "{err}");
}

#[test]
fn a_log_level_that_is_no_level_or_directive_is_refused() {
    for ok in [
        "info",
        "WARN",
        "off",
        "info,loopwatch=debug",
        "loopwatch::server=trace",
        "",
    ] {
        assert_eq!(error_of(&format!("[log]\nlevel = {ok:?}")), None, "{ok}");
    }
    // `EnvFilter` reads a bare word as a target: every other line would be off.
    let err = error_of("[log]\nlevel = \"chatty\"").unwrap_or_default();
    assert!(
        err.contains("log.level") && err.contains("\"chatty\""),
        "{err}"
    );
    let err = error_of("[log]\nlevel = \"loopwatch=loud\"").unwrap_or_default();
    assert!(err.contains("log.level"), "{err}");
}

#[test]
fn a_tool_rule_limited_to_an_unknown_profile_is_refused() {
    let rule = |profiles: &str| {
        format!("[[tools]]\nmatch = \"read_*\"\nrepeated_call = 4\nprofiles = {profiles}\n[profiles.strict]\nenabled = false\n")
    };
    assert_eq!(error_of(&rule("[\"stop\", \"strict\"]")), None);
    let err = error_of(&rule("[\"stpo\"]")).unwrap_or_default();
    assert!(
        err.contains("tools[0].profiles")
            && err.contains("\"stpo\"")
            && err.contains("nudge, stop, strict"),
        "{err}"
    );
}

#[test]
fn a_profile_key_error_names_no_source_code_location() {
    let err = error_of("[profiles.nudge]\nwindo = 10").unwrap_or_default();
    assert!(err.contains("profiles.nudge.windo"), "{err}");
    assert!(!err.contains(".rs:"), "{err}");
}

#[test]
fn an_admin_listen_address_that_does_not_parse_is_refused() {
    assert_eq!(error_of("[admin]\nlisten = \"\""), None);
    assert_eq!(error_of("[admin]\nlisten = \"0.0.0.0:9000\""), None);
    let err = error_of("[admin]\nlisten = \"nope\"").unwrap_or_default();
    assert!(
        err.contains("admin.listen") && err.contains("\"nope\""),
        "{err}"
    );
}
