//! `[ui] trace_url`: the link from a run to its trace in the user's tracing UI, a URL
//! template with a `{trace_id}` placeholder, checked once and filled in per trace.

/// The placeholder a trace URL template must contain.
pub const TRACE_ID_PLACEHOLDER: &str = "{trace_id}";

/// A validated `[ui] trace_url` template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceUrl {
    template: String,
}

impl TraceUrl {
    /// Validates `template`.
    ///
    /// # Errors
    /// Why it is not usable: no `{trace_id}`, not `http://` / `https://`, no host, or not a
    /// URL once the placeholder is filled in.
    pub fn new(template: &str) -> Result<Self, String> {
        if !template.contains(TRACE_ID_PLACEHOLDER) {
            return Err(format!(
                "{template:?} does not contain {TRACE_ID_PLACEHOLDER} (e.g. \"https://jaeger.example/trace/{TRACE_ID_PLACEHOLDER}\")"
            ));
        }
        let sample = template.replace(TRACE_ID_PLACEHOLDER, &"0".repeat(32));
        let uri = sample
            .parse::<http::Uri>()
            .map_err(|e| format!("{template:?} is not a URL: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) {
            return Err(format!("{template:?} is not an http:// or https:// URL"));
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(format!("{template:?} has no host"));
        }
        Ok(Self {
            template: template.to_string(),
        })
    }

    /// The link for `trace_id` (expected lowercase hex; any other character is
    /// percent-encoded, so the result stays a URL of the same host).
    pub fn for_trace(&self, trace_id: &str) -> String {
        let mut id = String::with_capacity(trace_id.len());
        for b in trace_id.bytes() {
            if b.is_ascii_alphanumeric() {
                id.push(b as char);
            } else {
                id.push_str(&format!("%{b:02X}"));
            }
        }
        self.template.replace(TRACE_ID_PLACEHOLDER, &id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_url_needs_the_placeholder_a_scheme_and_a_host() {
        let ok = TraceUrl::new("https://grafana.example/explore?trace={trace_id}&x=1").unwrap();
        assert_eq!(
            ok.for_trace("4bf92f3577b34da6a3ce929d0e0e4736"),
            "https://grafana.example/explore?trace=4bf92f3577b34da6a3ce929d0e0e4736&x=1"
        );
        assert_eq!(
            ok.for_trace("a/b"),
            "https://grafana.example/explore?trace=a%2Fb&x=1"
        );
        assert!(TraceUrl::new("http://127.0.0.1:16686/trace/{trace_id}").is_ok());
        for (bad, why) in [
            (
                "https://jaeger.example/trace/",
                "does not contain {trace_id}",
            ),
            ("javascript:alert(1)//{trace_id}", "is not"),
            ("ftp://host/{trace_id}", "is not an http:// or https:// URL"),
            ("/trace/{trace_id}", "is not an http:// or https:// URL"),
            ("https:///{trace_id}", "is not a URL"),
            ("https://exa mple/{trace_id}", "is not a URL"),
        ] {
            let err = TraceUrl::new(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
