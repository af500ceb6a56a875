//! `/metrics` content negotiation, and the Prometheus text format 0.0.4 made from the
//! OpenMetrics text `prometheus-client` writes (the crate writes OpenMetrics only:
//! `prometheus_client::encoding::text::encode`).
//!
//! Negotiation follows the Go exporters' (`prometheus/common`, `expfmt/encode.go`,
//! `NegotiateIncludingOpenMetrics`): the `Accept` media ranges in order of their `q`
//! (ties keep header order); the first `application/openmetrics-text` with no version or
//! version `1.0.0` / `0.0.1` picks OpenMetrics, the first `text/plain` with no version or
//! version `0.0.4` picks the text format; anything else (no header, `*/*`, protobuf,
//! `text/plain; version=1.0.0`) falls through to the text format. `q=0` refuses a range.
//! Prometheus sends OpenMetrics first (`scrape/scrape.go`, `acceptHeader`), so it keeps
//! scraping OpenMetrics; `promtool check metrics`, `curl` and browsers get the text format.
//!
//! From OpenMetrics 1.0 (`prometheus/OpenMetrics`, `specification/OpenMetrics.md`) to the
//! text format 0.0.4 (`prometheus/docs`, `content/docs/instrumenting/exposition_formats.md`;
//! the reader is `prometheus/common`, `expfmt/text_parse.go`), per family:
//! - a counter's `# HELP` / `# TYPE` name the sample, `<family>_total` (OpenMetrics names
//!   the family without the suffix, which the 0.0.4 reader takes for a different metric:
//!   promtool's "no help text");
//! - `info` becomes a `gauge` named `<family>_info` (its one sample), `stateset` a `gauge`,
//!   `unknown` is `untyped`; `gaugehistogram` has no 0.0.4 type, so its `# TYPE` line is left
//!   out and its samples read as untyped;
//! - `# UNIT` lines, `# EOF`, the `_created` samples of counters, histograms and summaries,
//!   and exemplars (` # {…} value [timestamp]` after a sample) are left out;
//! - a sample timestamp (seconds, may be fractional) becomes integer milliseconds;
//! - `# HELP` text: OpenMetrics escapes `\\`, `\n` and `\"`, 0.0.4 only `\\` and `\n`, so
//!   `\"` becomes `"`.
//!
//! Label sets, values (`+Inf`, `-Inf`, `NaN`) and the escaping inside label values are the
//! same in both formats and pass through.

/// `Content-Type` of the OpenMetrics answer.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text format 0.0.4 answer.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition format `/metrics` answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics text 1.0.0.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The `Content-Type` header value of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// The format for an `Accept` header value (`None`: no header). Never fails: a header that
/// does not parse asks for nothing known, so the answer is the text format.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut ranges: Vec<(f64, usize, Option<Format>)> = accept
        .split(',')
        .enumerate()
        .filter_map(|(i, range)| {
            let mut params = range.split(';').map(str::trim);
            let media = params.next()?.to_ascii_lowercase();
            let (mut q, mut version) = (1.0_f64, None);
            for param in params {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse().unwrap_or(0.0),
                    "version" => version = Some(value.to_owned()),
                    _ => {}
                }
            }
            if q.is_nan() || q <= 0.0 {
                return None;
            }
            let format = match (media.as_str(), version.as_deref()) {
                ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => {
                    Some(Format::OpenMetrics)
                }
                ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
                _ => None,
            };
            Some((q, i, format))
        })
        .collect();
    // Highest q first; equal q in header order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges
        .into_iter()
        .find_map(|(_, _, format)| format)
        .unwrap_or(Format::Text)
}

/// The metadata of one family, gathered before its first sample.
#[derive(Default)]
struct Family<'a> {
    name: &'a str,
    kind: Option<&'a str>,
    help: Option<&'a str>,
}

impl Family<'_> {
    /// Writes the 0.0.4 `# HELP` / `# TYPE` lines.
    fn write(&self, out: &mut String) {
        let (name, kind) = match self.kind {
            Some("counter") => (format!("{}_total", self.name), Some("counter")),
            Some("info") => (format!("{}_info", self.name), Some("gauge")),
            Some("stateset") => (self.name.to_owned(), Some("gauge")),
            Some("unknown") => (self.name.to_owned(), Some("untyped")),
            Some("gaugehistogram") | None => (self.name.to_owned(), None),
            Some(other) => (self.name.to_owned(), Some(other)),
        };
        if let Some(help) = self.help {
            out.push_str("# HELP ");
            out.push_str(&name);
            out.push(' ');
            push_help(out, help);
            out.push('\n');
        }
        if let Some(kind) = kind {
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
        }
    }

    /// Whether the family has a `_created` sample to leave out.
    fn has_created(&self) -> bool {
        matches!(self.kind, Some("counter" | "histogram" | "summary"))
    }
}

/// HELP text with OpenMetrics' `\"` unescaped (the other escapes are 0.0.4's too).
fn push_help(out: &mut String, help: &str) {
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push_str("\\\\"),
        }
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition (see the module docs for
/// every difference handled). Lines it does not recognise pass through unchanged.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut family = Family::default();
    // Metadata seen but not written yet (written before the family's first sample, or when
    // the next family begins, so a counter's HELP is named after its TYPE is known).
    let mut pending = false;
    for line in openmetrics.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let keyword = parts.next().unwrap_or("");
            if keyword == "EOF" {
                continue;
            }
            let (Some(name), rest) = (parts.next(), parts.next().unwrap_or("")) else {
                continue;
            };
            if !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
                continue;
            }
            if name != family.name {
                if pending {
                    family.write(&mut out);
                }
                family = Family {
                    name,
                    ..Family::default()
                };
            }
            pending = true;
            match keyword {
                "HELP" => family.help = Some(rest),
                "TYPE" => family.kind = Some(rest.trim()),
                _ => {}
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if pending {
            family.write(&mut out);
            pending = false;
        }
        let (series, value, timestamp) = split_sample(line);
        if family.has_created()
            && series
                .split('{')
                .next()
                .and_then(|n| n.strip_prefix(family.name))
                == Some("_created")
        {
            continue;
        }
        out.push_str(series);
        out.push(' ');
        out.push_str(value);
        if let Some(ms) = timestamp.and_then(seconds_to_millis) {
            out.push(' ');
            out.push_str(&ms.to_string());
        }
        out.push('\n');
    }
    if pending {
        family.write(&mut out);
    }
    out
}

/// A sample line's name and label set, its value, and its timestamp if any; an exemplar
/// (` # {…} …`) is not part of any of them.
fn split_sample(line: &str) -> (&str, &str, Option<&str>) {
    // The label set ends at the first `}` outside a quoted label value.
    let mut end = line.find([' ', '{']).unwrap_or(line.len());
    if line[end..].starts_with('{') {
        let (mut quoted, mut escaped) = (false, false);
        for (i, b) in line.bytes().enumerate().skip(end + 1) {
            match b {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                b'}' if !quoted => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
    }
    let series = &line[..end];
    let rest = line[end..].split(" # ").next().unwrap_or("");
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().unwrap_or("");
    (series, value, fields.next())
}

/// An OpenMetrics timestamp (seconds) as 0.0.4's integer milliseconds.
fn seconds_to_millis(seconds: &str) -> Option<i64> {
    let s: f64 = seconds.parse().ok()?;
    let ms = (s * 1000.0).round();
    (ms.is_finite() && ms.abs() < 9.0e15).then_some(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus sends (2.x: `scrape/scrape.go` `scrapeAcceptHeader`; 3.x adds
    /// `escaping=…` and a `text/plain; version=1.0.0` range).
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

    #[test]
    fn negotiation_picks_openmetrics_only_when_asked_for() {
        for (accept, want) in [
            (Some(PROMETHEUS_2), Format::OpenMetrics),
            (Some(PROMETHEUS_3), Format::OpenMetrics),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("application/openmetrics-text; version=0.0.1"),
                Format::OpenMetrics,
            ),
            (
                Some("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.5, Application/OpenMetrics-Text; version=1.0.0"),
                Format::OpenMetrics,
            ),
            (Some("application/openmetrics-text;q=0, */*"), Format::Text),
            (
                Some("application/openmetrics-text; version=2.0.0"),
                Format::Text,
            ),
            (Some("text/plain;version=0.0.4"), Format::Text),
            (Some("text/plain; version=1.0.0"), Format::Text),
            (Some("*/*"), Format::Text),
            (Some(""), Format::Text),
            (Some(";;,,=;q=x"), Format::Text),
            (None, Format::Text),
        ] {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
        assert_eq!(
            Format::Text.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }

    #[test]
    fn counters_are_named_with_total_and_openmetrics_only_lines_go() {
        let om = "\
# HELP lw_spans Spans \\\"received\\\" \\\\ here.
# TYPE lw_spans counter
lw_spans_total{k=\"a # {b}\"} 3 # {trace_id=\"00ff\"} 1.0 1700000000.5
lw_spans_created{k=\"a # {b}\"} 1700000000.25
# HELP lw_latency_seconds Latency.
# TYPE lw_latency_seconds histogram
# UNIT lw_latency_seconds seconds
lw_latency_seconds_sum 0.5
lw_latency_seconds_count 1
lw_latency_seconds_bucket{le=\"+Inf\"} 1
lw_latency_seconds_created 1700000000
# HELP lw_build Build.
# TYPE lw_build info
lw_build_info{version=\"1\"} 1
# TYPE lw_odd unknown
lw_odd NaN 1700000000.123
# HELP lw_up Up.
# TYPE lw_up gauge
lw_up 1
# HELP lw_empty No samples.
# TYPE lw_empty counter
# EOF
";
        let want = "\
# HELP lw_spans_total Spans \"received\" \\\\ here.
# TYPE lw_spans_total counter
lw_spans_total{k=\"a # {b}\"} 3
# HELP lw_latency_seconds Latency.
# TYPE lw_latency_seconds histogram
lw_latency_seconds_sum 0.5
lw_latency_seconds_count 1
lw_latency_seconds_bucket{le=\"+Inf\"} 1
# HELP lw_build_info Build.
# TYPE lw_build_info gauge
lw_build_info{version=\"1\"} 1
# TYPE lw_odd untyped
lw_odd NaN 1700000000123
# HELP lw_up Up.
# TYPE lw_up gauge
lw_up 1
# HELP lw_empty_total No samples.
# TYPE lw_empty_total counter
";
        assert_eq!(openmetrics_to_text(om), want);
    }

    #[test]
    fn what_the_registry_writes_converts_to_total_names_without_eof() {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::gauge::Gauge;
        let mut registry = prometheus_client::registry::Registry::with_prefix("loopwatch");
        let counter: Counter = Counter::default();
        counter.inc_by(7);
        registry.register("spans_received", "Spans received", counter);
        let gauge: Gauge = Gauge::default();
        gauge.set(2);
        registry.register("queue_depth", "Queued", gauge);
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry).unwrap();
        assert!(
            om.contains("# TYPE loopwatch_spans_received counter\n"),
            "{om}"
        );
        assert_eq!(
            openmetrics_to_text(&om),
            "# HELP loopwatch_spans_received_total Spans received.\n\
             # TYPE loopwatch_spans_received_total counter\n\
             loopwatch_spans_received_total 7\n\
             # HELP loopwatch_queue_depth Queued.\n\
             # TYPE loopwatch_queue_depth gauge\n\
             loopwatch_queue_depth 2\n"
        );
    }
}
