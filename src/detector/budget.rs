//! Per-run budgets (`[budgets]`): how many tool calls, calls of one tool, how long, how
//! many tokens and how many dollars a run may use (and how many handoffs between agents,
//! counted by [`super::delegation`]). Exceeding one is a `budget_exceeded` detection, once
//! per budget per run. Pure: the figures come from spans (times, `gen_ai.usage.*`) and the
//! configured price table ([`super::cost`]).

use std::collections::BTreeMap;

use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cost::{dollars, Price};
use super::Action;

/// `[budgets]`: every limit 0 / unset = off (the default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budgets {
    /// Tool calls per run.
    pub max_tool_calls: u64,
    /// Calls of any one tool (by name) per run.
    pub max_calls_per_tool: u64,
    /// From the run's first span start to its latest span end, e.g. `"10m"`.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<Duration>,
    /// `gen_ai.usage.input_tokens` + `gen_ai.usage.output_tokens` summed over the run's
    /// inference spans.
    pub max_tokens: u64,
    /// USD per run: the recorded cost of its inference spans, else their tokens × the
    /// model's price in `prices` ([`super::cost`]); 0 = off.
    pub max_cost_usd: f64,
    /// `[budgets.prices."<model glob>"]`: `input_per_mtok` / `output_per_mtok`, USD per
    /// million tokens, for spans that record no cost of their own.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// Handoffs between agents per run (every change of the agent the run is handed to,
    /// [`super::delegation`]); 0 = off.
    pub max_handoffs: u64,
    /// `warn` (default) or `kill`.
    pub action: BudgetAction,
}

/// The action of a budget detection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetAction {
    #[default]
    Warn,
    Kill,
}

impl From<BudgetAction> for Action {
    fn from(a: BudgetAction) -> Action {
        match a {
            BudgetAction::Warn => Action::Warn,
            BudgetAction::Kill => Action::Kill,
        }
    }
}

impl Budgets {
    /// Some budget kept per span is set (every budget but `max_handoffs`, which the
    /// delegation tracker keeps).
    pub fn any(&self) -> bool {
        self.max_tool_calls > 0
            || self.max_calls_per_tool > 0
            || self.max_duration.is_some_and(|d| !d.is_zero())
            || self.max_tokens > 0
            || self.max_cost_usd > 0.0
    }

    /// `max_cost_usd` in micro-dollars (0 = off).
    pub fn max_cost_micro_usd(&self) -> u64 {
        if self.max_cost_usd.is_finite() && self.max_cost_usd > 0.0 {
            (self.max_cost_usd * 1e6).round() as u64
        } else {
            0
        }
    }

    /// Problems of the budget settings, as (config key, reason): `max_cost_usd` a finite
    /// number ≥ 0, the price table ([`super::cost::Prices::compile`]), and prices that can
    /// be used (`max_cost_usd` set).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !self.max_cost_usd.is_finite() || self.max_cost_usd < 0.0 {
            return Err((
                "budgets.max_cost_usd".into(),
                format!("must be a number ≥ 0 (0 = off), got {}", self.max_cost_usd),
            ));
        }
        super::cost::Prices::compile(&self.prices).map(drop)
    }
}

/// Which budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Budget {
    MaxToolCalls,
    MaxCallsPerTool,
    MaxDuration,
    MaxTokens,
    MaxCostUsd,
    MaxHandoffs,
}

impl Budget {
    /// The config key, e.g. `"max_tool_calls"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::MaxToolCalls => "max_tool_calls",
            Budget::MaxCallsPerTool => "max_calls_per_tool",
            Budget::MaxDuration => "max_duration",
            Budget::MaxTokens => "max_tokens",
            Budget::MaxCostUsd => "max_cost_usd",
            Budget::MaxHandoffs => "max_handoffs",
        }
    }
}

/// A budget exceeded: its limit and the figure that passed it (durations in ms, costs in
/// micro-dollars).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub budget: Budget,
    pub limit: u64,
    pub value: u64,
    /// The tool, for `max_calls_per_tool`.
    pub tool: Option<Arc<str>>,
}

impl Exceeded {
    /// One sentence for `loop.reason`, e.g. "budget max_tool_calls exceeded: 51 tool
    /// calls (limit 50)".
    pub fn reason(&self) -> String {
        let (value, limit) = (self.value, self.limit);
        match self.budget {
            Budget::MaxToolCalls => {
                format!("budget max_tool_calls exceeded: {value} tool calls (limit {limit})")
            }
            Budget::MaxCallsPerTool => format!(
                "budget max_calls_per_tool exceeded: {} called {value} times (limit {limit})",
                self.tool.as_deref().unwrap_or("a tool")
            ),
            Budget::MaxDuration => format!(
                "budget max_duration exceeded: the run has lasted {} (limit {})",
                humantime::format_duration(Duration::from_millis(value)),
                humantime::format_duration(Duration::from_millis(limit))
            ),
            Budget::MaxTokens => {
                format!("budget max_tokens exceeded: {value} tokens (limit {limit})")
            }
            Budget::MaxCostUsd => format!(
                "budget max_cost_usd exceeded: {} spent on model calls (limit {})",
                dollars(value),
                dollars(limit)
            ),
            Budget::MaxHandoffs => format!(
                "budget max_handoffs exceeded: the run was handed between agents {value} times (limit {limit})"
            ),
        }
    }
}

/// What one span adds to its run's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpanFigures<'a> {
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    /// The tool, when the span is a tool call.
    pub tool_name: Option<&'a str>,
    /// Input + output tokens, when the span is an inference span.
    pub tokens: u64,
    /// What the span cost, micro-dollars ([`super::cost`]).
    pub cost_micro_usd: u64,
    /// An inference span whose cost could not be found (no recorded cost, no price).
    pub unpriced: bool,
}

/// One run's figures and the budgets already reported.
#[derive(Clone, Debug, Default)]
pub struct BudgetState {
    tool_calls: u64,
    per_tool: HashMap<Arc<str>, u64>,
    first_start: Option<u64>,
    last_end: u64,
    tokens: u64,
    cost_micro_usd: u64,
    unpriced: u64,
    reported: Vec<Budget>,
}

impl BudgetState {
    /// Tool calls counted so far.
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls
    }

    /// Inference spans so far whose cost could not be found (for `explain`: a cost budget
    /// blind to them).
    pub fn unpriced(&self) -> u64 {
        self.unpriced
    }

    /// Each set budget of `budgets` with the run's figure so far and its limit, in
    /// [`Budget`] declaration order: tool calls, the busiest tool's calls (that tool
    /// named; ties: the first name in order), duration in ms, tokens. For `loopwatch
    /// explain` ("why not": how far a run is from each budget).
    pub fn standing(&self, budgets: &Budgets) -> Vec<Exceeded> {
        let mut out = Vec::new();
        let mut add = |budget, value, limit: u64, tool| {
            if limit > 0 {
                out.push(Exceeded {
                    budget,
                    limit,
                    value,
                    tool,
                });
            }
        };
        add(
            Budget::MaxToolCalls,
            self.tool_calls,
            budgets.max_tool_calls,
            None,
        );
        let busiest = self
            .per_tool
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)));
        add(
            Budget::MaxCallsPerTool,
            busiest.map_or(0, |(_, n)| *n),
            budgets.max_calls_per_tool,
            busiest.map(|(tool, _)| tool.clone()),
        );
        let ms = self
            .first_start
            .map_or(0, |first| self.last_end.saturating_sub(first) / 1_000_000);
        let limit_ms = budgets.max_duration.map_or(0, |d| d.as_millis() as u64);
        add(Budget::MaxDuration, ms, limit_ms, None);
        add(Budget::MaxTokens, self.tokens, budgets.max_tokens, None);
        add(
            Budget::MaxCostUsd,
            self.cost_micro_usd,
            budgets.max_cost_micro_usd(),
            None,
        );
        out
    }

    /// Adds a span; returns the budgets it pushed over (each at most once per run).
    pub fn observe(&mut self, budgets: &Budgets, span: SpanFigures<'_>) -> Vec<Exceeded> {
        let mut out = Vec::new();
        let mut check = |budget: Budget,
                         value: u64,
                         limit: u64,
                         tool: Option<Arc<str>>,
                         reported: &mut Vec<Budget>| {
            if limit > 0 && value > limit && !reported.contains(&budget) {
                reported.push(budget);
                out.push(Exceeded {
                    budget,
                    limit,
                    value,
                    tool,
                });
            }
        };
        if let Some(tool) = span.tool_name {
            self.tool_calls += 1;
            check(
                Budget::MaxToolCalls,
                self.tool_calls,
                budgets.max_tool_calls,
                None,
                &mut self.reported,
            );
            if budgets.max_calls_per_tool > 0 {
                let n = match self.per_tool.get_mut(tool) {
                    Some(n) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        self.per_tool.insert(Arc::from(tool), 1);
                        1
                    }
                };
                check(
                    Budget::MaxCallsPerTool,
                    n,
                    budgets.max_calls_per_tool,
                    Some(Arc::from(tool)),
                    &mut self.reported,
                );
            }
        }
        self.tokens = self.tokens.saturating_add(span.tokens);
        check(
            Budget::MaxTokens,
            self.tokens,
            budgets.max_tokens,
            None,
            &mut self.reported,
        );
        self.cost_micro_usd = self.cost_micro_usd.saturating_add(span.cost_micro_usd);
        self.unpriced += u64::from(span.unpriced);
        check(
            Budget::MaxCostUsd,
            self.cost_micro_usd,
            budgets.max_cost_micro_usd(),
            None,
            &mut self.reported,
        );
        if span.start_time_unix_nano > 0 {
            let first = self.first_start.get_or_insert(span.start_time_unix_nano);
            *first = (*first).min(span.start_time_unix_nano);
        }
        self.last_end = self.last_end.max(span.end_time_unix_nano);
        if let (Some(limit), Some(first)) = (budgets.max_duration, self.first_start) {
            let ms = self.last_end.saturating_sub(first) / 1_000_000;
            let limit_ms = limit.as_millis() as u64;
            if limit_ms > 0 && self.last_end.saturating_sub(first) > limit.as_nanos() as u64 {
                check(Budget::MaxDuration, ms, limit_ms, None, &mut self.reported);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, start: u64) -> SpanFigures<'_> {
        SpanFigures {
            start_time_unix_nano: start,
            end_time_unix_nano: start + 1,
            tool_name: Some(tool),
            ..SpanFigures::default()
        }
    }

    #[test]
    fn standing_lists_the_set_budgets_with_the_figures_so_far() {
        let budgets = Budgets {
            max_tool_calls: 10,
            max_calls_per_tool: 5,
            max_duration: Some(Duration::from_secs(60)),
            ..Budgets::default()
        };
        let mut run = BudgetState::default();
        for (tool, start) in [("b", 1_000_000), ("a", 2_000_000), ("a", 3_000_000)] {
            run.observe(&budgets, call(tool, start));
        }
        let figures: Vec<_> = run
            .standing(&budgets)
            .into_iter()
            .map(|e| (e.budget, e.value, e.limit, e.tool.map(|t| t.to_string())))
            .collect();
        assert_eq!(
            figures,
            [
                (Budget::MaxToolCalls, 3, 10, None),
                (Budget::MaxCallsPerTool, 2, 5, Some("a".to_string())),
                (Budget::MaxDuration, 2, 60_000, None),
            ]
        );
        assert!(BudgetState::default()
            .standing(&Budgets::default())
            .is_empty());
    }

    #[test]
    fn each_budget_fires_once_when_passed() {
        let budgets = Budgets {
            max_tool_calls: 3,
            max_calls_per_tool: 2,
            max_duration: Some(Duration::from_secs(60)),
            max_tokens: 100,
            action: BudgetAction::Kill,
            ..Budgets::default()
        };
        let mut run = BudgetState::default();
        assert!(run.observe(&budgets, call("a", 1)).is_empty());
        assert!(run.observe(&budgets, call("b", 2)).is_empty());
        assert!(run.observe(&budgets, call("a", 3)).is_empty());
        let fourth = run.observe(&budgets, call("a", 4));
        assert_eq!(
            fourth
                .iter()
                .map(|e| (e.budget, e.value, e.limit))
                .collect::<Vec<_>>(),
            [
                (Budget::MaxToolCalls, 4, 3),
                (Budget::MaxCallsPerTool, 3, 2)
            ]
        );
        assert_eq!(
            fourth[0].reason(),
            "budget max_tool_calls exceeded: 4 tool calls (limit 3)"
        );
        assert_eq!(
            fourth[1].reason(),
            "budget max_calls_per_tool exceeded: a called 3 times (limit 2)"
        );
        assert!(
            run.observe(&budgets, call("a", 5)).is_empty(),
            "once per budget"
        );
        let inference = SpanFigures {
            start_time_unix_nano: 6,
            end_time_unix_nano: 61_000_000_007,
            tool_name: None,
            tokens: 101,
            ..SpanFigures::default()
        };
        let late = run.observe(&budgets, inference);
        assert_eq!(
            late.iter().map(|e| e.budget).collect::<Vec<_>>(),
            [Budget::MaxTokens, Budget::MaxDuration]
        );
        assert_eq!(
            late[1].reason(),
            "budget max_duration exceeded: the run has lasted 1m 1s (limit 1m)"
        );
    }

    #[test]
    fn no_budget_no_detection() {
        let mut run = BudgetState::default();
        for i in 0..1000 {
            assert!(run.observe(&Budgets::default(), call("a", i)).is_empty());
        }
        assert!(!Budgets::default().any());
    }

    #[test]
    fn cost_budget_sums_the_run_and_fires_once() {
        let budgets = Budgets {
            max_cost_usd: 0.01,
            ..Budgets::default()
        };
        assert!(budgets.any());
        assert_eq!(budgets.max_cost_micro_usd(), 10_000);
        let mut run = BudgetState::default();
        let model = |micro: u64| SpanFigures {
            cost_micro_usd: micro,
            ..SpanFigures::default()
        };
        assert!(run.observe(&budgets, model(6_000)).is_empty());
        assert!(
            run.observe(&budgets, model(4_000)).is_empty(),
            "at the limit"
        );
        let passed = run.observe(&budgets, model(1));
        assert_eq!(
            passed
                .iter()
                .map(|e| (e.budget, e.value, e.limit))
                .collect::<Vec<_>>(),
            [(Budget::MaxCostUsd, 10_001, 10_000)]
        );
        assert_eq!(
            passed[0].reason(),
            "budget max_cost_usd exceeded: $0.010001 spent on model calls (limit $0.01)"
        );
        assert!(
            run.observe(&budgets, model(50_000)).is_empty(),
            "once per run"
        );
        let unpriced = SpanFigures {
            unpriced: true,
            ..SpanFigures::default()
        };
        run.observe(&budgets, unpriced);
        assert_eq!(run.unpriced(), 1);
        assert_eq!(
            run.standing(&budgets)
                .iter()
                .map(|e| (e.budget, e.value))
                .collect::<Vec<_>>(),
            [(Budget::MaxCostUsd, 60_001)]
        );
    }

    #[test]
    fn invalid_cost_settings_name_their_key() {
        let negative = Budgets {
            max_cost_usd: -1.0,
            ..Budgets::default()
        };
        assert_eq!(negative.validate().unwrap_err().0, "budgets.max_cost_usd");
        assert_eq!(Budgets::default().validate(), Ok(()));
    }
}
