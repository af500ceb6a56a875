//! What an inference span used ([`ModelUsage`]): tokens, model and recorded cost, read in
//! one pass over its attributes for the token and cost budgets.
//!
//! An inference span is one with `gen_ai.operation.name` = `chat` / `text_completion` /
//! `generate_content`; any other span uses nothing (agent spans often repeat their
//! children's totals). Tokens: `gen_ai.usage.input_tokens` + `gen_ai.usage.output_tokens`
//! (an int, a positive double, or a number in a string; anything else 0). Model:
//! `gen_ai.response.model`, else `gen_ai.request.model`. Recorded cost: the keys of
//! [`crate::detector::cost`], first found.

use crate::detector::cost::ModelUsage;
use crate::otlp::view::{SpanView, ValueView};

/// Cost keys holding a whole cost, in preference order.
const TOTAL_COST_KEYS: [&str; 4] = [
    "gen_ai.usage.cost.total",
    "gen_ai.usage.cost",
    "gen_ai.usage.total_cost",
    "gen_ai.usage.cost_usd",
];

/// The usage of an inference span; `None` for any other span.
pub fn model_usage<'a>(span: &'a SpanView<'a>) -> Option<ModelUsage<'a>> {
    let mut inference = false;
    let mut usage = ModelUsage::default();
    let mut request_model = None;
    let mut total: [Option<f64>; 4] = [None; 4];
    let (mut input_cost, mut output_cost) = (None, None);
    for kv in span.attributes.iter() {
        // The key is read as text only when it starts with `gen_ai.`.
        let Some(key) = kv.key.strip_prefix("gen_ai.") else {
            continue;
        };
        let Some(value) = kv.value.as_ref().and_then(|v| v.value.as_ref()) else {
            continue;
        };
        match key {
            "operation.name" => {
                inference = matches!(
                    value,
                    ValueView::StringValue(op)
                        if matches!(&**op, "chat" | "text_completion" | "generate_content")
                );
            }
            "usage.input_tokens" => usage.input_tokens = count(value),
            "usage.output_tokens" => usage.output_tokens = count(value),
            "response.model" => usage.model = text(value).or(usage.model),
            "request.model" => request_model = text(value),
            "usage.cost.input" | "usage.cost.prompt" => input_cost = input_cost.or(number(value)),
            "usage.cost.output" | "usage.cost.completion" => {
                output_cost = output_cost.or(number(value))
            }
            rest => {
                if let Some(i) = TOTAL_COST_KEYS
                    .iter()
                    .position(|k| &k["gen_ai.".len()..] == rest)
                {
                    total[i] = total[i].or(number(value));
                }
            }
        }
    }
    if !inference {
        return None;
    }
    usage.model = usage.model.or(request_model);
    usage.cost_usd = total
        .into_iter()
        .flatten()
        .next()
        .or(match (input_cost, output_cost) {
            (None, None) => None,
            (input, output) => Some(input.unwrap_or(0.0) + output.unwrap_or(0.0)),
        });
    Some(usage)
}

/// A token count: an int, a positive double, or a number in a string; else 0.
fn count(value: &ValueView) -> u64 {
    match value {
        ValueView::IntValue(n) => u64::try_from(*n).unwrap_or(0),
        ValueView::DoubleValue(d) if *d > 0.0 => *d as u64,
        ValueView::StringValue(s) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// A cost in USD: a number, or a number in a string.
fn number(value: &ValueView) -> Option<f64> {
    match value {
        ValueView::DoubleValue(d) => Some(*d),
        ValueView::IntValue(n) => Some(*n as f64),
        ValueView::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|c: &f64| c.is_finite() && *c >= 0.0)
}

/// A non-empty string.
fn text<'a>(value: &'a ValueView<'a>) -> Option<&'a str> {
    match value {
        ValueView::StringValue(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::{kv, kvs, span};
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};

    fn double(d: f64) -> AnyValue {
        AnyValue {
            value: Some(Value::DoubleValue(d)),
        }
    }

    fn int(n: i64) -> AnyValue {
        AnyValue {
            value: Some(Value::IntValue(n)),
        }
    }

    #[test]
    fn usage_of_inference_spans_only() {
        let chat = span(
            "chat gpt-4o-mini",
            vec![
                kvs("gen_ai.operation.name", "chat"),
                kvs("gen_ai.request.model", "gpt-4o-mini"),
                kvs("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
                kv("gen_ai.usage.input_tokens", int(1200)),
                kvs("gen_ai.usage.output_tokens", "80"),
            ],
        );
        let view = SpanView::from(&chat);
        let usage = model_usage(&view).expect("an inference span");
        assert_eq!((usage.input_tokens, usage.output_tokens), (1200, 80));
        assert_eq!(usage.model, Some("gpt-4o-mini-2024-07-18"));
        assert_eq!(usage.cost_usd, None);
        let agent = span(
            "invoke_agent a",
            vec![
                kvs("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.usage.input_tokens", int(5000)),
            ],
        );
        assert_eq!(model_usage(&SpanView::from(&agent)), None);
    }

    #[test]
    fn recorded_cost_forms() {
        let with = |attrs: Vec<(&str, AnyValue)>| {
            let mut all = vec![kvs("gen_ai.operation.name", "chat")];
            all.extend(attrs.into_iter().map(|(k, v)| kv(k, v)));
            let sp = span("chat", all);
            let view = SpanView::from(&sp);
            model_usage(&view).unwrap().cost_usd
        };
        assert_eq!(
            with(vec![("gen_ai.usage.cost.total", double(0.05))]),
            Some(0.05)
        );
        assert_eq!(with(vec![("gen_ai.usage.cost", double(0.02))]), Some(0.02));
        assert_eq!(
            with(vec![(
                "gen_ai.usage.cost_usd",
                AnyValue {
                    value: Some(Value::StringValue("0.5".into()))
                }
            )]),
            Some(0.5)
        );
        // The total wins over its parts; parts alone are summed.
        assert_eq!(
            with(vec![
                ("gen_ai.usage.cost.prompt", double(0.01)),
                ("gen_ai.usage.cost.total", double(0.05)),
            ]),
            Some(0.05)
        );
        assert_eq!(
            with(vec![
                ("gen_ai.usage.cost.input", double(0.01)),
                ("gen_ai.usage.cost.output", double(0.02)),
            ]),
            Some(0.03)
        );
        // Negative or non-numeric costs are not costs.
        assert_eq!(with(vec![("gen_ai.usage.cost", double(-1.0))]), None);
    }
}
