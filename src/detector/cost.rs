//! What a model call cost, for the `max_cost_usd` budget ([`super::budget`]). Pure: the
//! figures come from the span (`gen_ai.usage.*`, the model name) and the configured price
//! table.
//!
//! A span's cost is, first found:
//! 1. a cost the instrumentation recorded, in USD: `gen_ai.usage.cost.total`
//!    (genai-otel-instrument, Braintrust's cost processor, the `gen_ai.usage.cost.*`
//!    proposal), `gen_ai.usage.cost` (read by Langfuse as the generation's cost),
//!    `gen_ai.usage.total_cost`, `gen_ai.usage.cost_usd`, else the sum of its parts
//!    (`gen_ai.usage.cost.input` or `.prompt`, `gen_ai.usage.cost.output` or
//!    `.completion`);
//! 2. else tokens × the price of the model (`gen_ai.response.model`, else
//!    `gen_ai.request.model`) in `[budgets.prices."<glob>"]`: `input_per_mtok` and
//!    `output_per_mtok`, USD per million input / output tokens. When several globs match,
//!    the longest pattern wins (the most specific; ties: the first in name order).
//!
//! Costs are kept in micro-dollars (1e-6 USD), integers, so a run's total is exact.

use std::collections::BTreeMap;

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Serialize};

/// Prices of one model (glob), USD per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Price {
    /// USD per million input (prompt) tokens.
    pub input_per_mtok: f64,
    /// USD per million output (completion) tokens.
    pub output_per_mtok: f64,
}

/// The price table, compiled: globs on the model name.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    /// (pattern, matcher, price), longest pattern first.
    entries: Vec<(String, GlobMatcher, Price)>,
}

impl Prices {
    /// Compiles `[budgets.prices]`. An invalid glob or a price that is negative or not a
    /// finite number is an error naming its key (`budgets.prices."<glob>".input_per_mtok`).
    pub fn compile(table: &BTreeMap<String, Price>) -> Result<Prices, (String, String)> {
        let mut entries = Vec::with_capacity(table.len());
        for (pattern, price) in table {
            let key = |field: &str| match field {
                "" => format!("budgets.prices.{pattern:?}"),
                field => format!("budgets.prices.{pattern:?}.{field}"),
            };
            let glob = Glob::new(pattern).map_err(|e| {
                (
                    key(""),
                    format!("{pattern:?} is not a valid glob: {}", e.kind()),
                )
            })?;
            for (field, value) in [
                ("input_per_mtok", price.input_per_mtok),
                ("output_per_mtok", price.output_per_mtok),
            ] {
                if !value.is_finite() || value < 0.0 {
                    return Err((key(field), format!("must be a number ≥ 0, got {value}")));
                }
            }
            entries.push((pattern.clone(), glob.compile_matcher(), *price));
        }
        // Longest pattern first; the map's name order breaks ties (a stable sort).
        entries.sort_by_key(|(pattern, _, _)| std::cmp::Reverse(pattern.len()));
        Ok(Prices { entries })
    }

    /// The price of `model` and the glob that gave it.
    pub fn of(&self, model: &str) -> Option<(&str, Price)> {
        self.entries
            .iter()
            .find(|(_, glob, _)| glob.is_match(model))
            .map(|(pattern, _, price)| (pattern.as_str(), *price))
    }

    /// No prices configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a model span records about its usage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelUsage<'a> {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `gen_ai.response.model`, else `gen_ai.request.model`.
    pub model: Option<&'a str>,
    /// A cost the instrumentation recorded, USD.
    pub cost_usd: Option<f64>,
}

/// How a span's cost was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostSource {
    /// The span's own cost attribute.
    Recorded,
    /// Tokens × the configured price.
    Priced,
}

impl ModelUsage<'_> {
    /// Input + output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The cost in micro-dollars and how it was found; `None` when the span recorded no
    /// cost and its model has no price (or it names no model).
    pub fn cost(&self, prices: &Prices) -> Option<(u64, CostSource)> {
        if let Some(usd) = self.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            return Some(((usd * 1e6).round() as u64, CostSource::Recorded));
        }
        let (_, price) = prices.of(self.model?)?;
        // USD per million tokens × tokens = micro-dollars.
        let micro = self.input_tokens as f64 * price.input_per_mtok
            + self.output_tokens as f64 * price.output_per_mtok;
        Some((micro.round() as u64, CostSource::Priced))
    }
}

/// Micro-dollars as dollars for a sentence: every cent, and the fractions of a cent that
/// are not zero (`$0.01`, `$0.010001`, `$12.50`).
pub fn dollars(micro: u64) -> String {
    let text = format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000);
    let trimmed = text.trim_end_matches('0');
    let cents = text.find('.').map_or(text.len(), |dot| dot + 3);
    format!("${}", &text[..trimmed.len().max(cents)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, f64, f64)]) -> BTreeMap<String, Price> {
        entries
            .iter()
            .map(|(glob, input, output)| {
                (
                    glob.to_string(),
                    Price {
                        input_per_mtok: *input,
                        output_per_mtok: *output,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_most_specific_glob_prices_the_model() {
        let prices = Prices::compile(&table(&[
            ("gpt-4o*", 2.5, 10.0),
            ("gpt-4o-mini*", 0.15, 0.6),
        ]))
        .unwrap();
        assert_eq!(
            prices.of("gpt-4o-mini-2024-07-18").unwrap().0,
            "gpt-4o-mini*"
        );
        assert_eq!(prices.of("gpt-4o-2024-08-06").unwrap().0, "gpt-4o*");
        assert_eq!(prices.of("claude-sonnet-4"), None);
        let usage = ModelUsage {
            input_tokens: 1200,
            output_tokens: 80,
            model: Some("gpt-4o-mini"),
            cost_usd: None,
        };
        // 1200 × 0.15 + 80 × 0.6 = 228 micro-dollars.
        assert_eq!(usage.cost(&prices), Some((228, CostSource::Priced)));
        assert_eq!(dollars(228), "$0.000228");
        assert_eq!(dollars(12_500_000), "$12.50");
        assert_eq!(dollars(10_000), "$0.01");
        assert_eq!(dollars(0), "$0.00");
        // A recorded cost wins over the price table.
        let recorded = ModelUsage {
            cost_usd: Some(0.0125),
            ..usage
        };
        assert_eq!(recorded.cost(&prices), Some((12_500, CostSource::Recorded)));
        // No model, no price: no cost.
        let unnamed = ModelUsage {
            model: None,
            ..usage
        };
        assert_eq!(unnamed.cost(&prices), None);
    }

    #[test]
    fn bad_prices_are_errors_naming_their_key() {
        let negative = Prices::compile(&table(&[("gpt-*", -1.0, 1.0)])).unwrap_err();
        assert_eq!(negative.0, "budgets.prices.\"gpt-*\".input_per_mtok");
        let nan = Prices::compile(&table(&[("gpt-*", 1.0, f64::NAN)])).unwrap_err();
        assert_eq!(nan.0, "budgets.prices.\"gpt-*\".output_per_mtok");
        let glob = Prices::compile(&table(&[("gpt-[", 1.0, 1.0)])).unwrap_err();
        assert_eq!(glob.0, "budgets.prices.\"gpt-[\"");
    }
}
