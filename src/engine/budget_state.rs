//! Per-run budget state for the engine: the figures of each run ([`BudgetState`]) and the
//! `budget_exceeded` detections they produced. Bounded like the registry: at most
//! `max_runs` runs; past it, the least recently seen are dropped first.

use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;

use crate::detector::budget::{BudgetState, Budgets, Exceeded, SpanFigures};
use crate::detector::cost::Prices;
use crate::detector::{Detection, Pattern, ProfileSettings, Severity};
use crate::registry::RunDetection;

/// `loop.profile` of budget detections.
pub const BUDGET_PROFILE: &str = "budgets";

/// The span a budget detection is attached to.
pub struct SpanContext<'a> {
    pub run_key: &'a Arc<str>,
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
}

struct RunBudget {
    state: BudgetState,
    detections: Vec<RunDetection>,
    last_seen: Instant,
}

/// Budgets of every run.
pub struct BudgetTracker {
    budgets: Budgets,
    prices: Prices,
    profile: Arc<ProfileSettings>,
    runs: DashMap<Arc<str>, RunBudget, foldhash::fast::RandomState>,
    max_runs: usize,
}

impl BudgetTracker {
    /// A tracker for `budgets`, keeping at most `max_runs` runs.
    pub fn new(budgets: Budgets, max_runs: usize) -> Self {
        let profile = ProfileSettings {
            name: BUDGET_PROFILE.into(),
            action: budgets.action.into(),
            ..ProfileSettings::nudge()
        };
        // The configuration was validated ([`Budgets::validate`]); a table that does not
        // compile prices nothing.
        let prices = Prices::compile(&budgets.prices).unwrap_or_default();
        BudgetTracker {
            budgets,
            prices,
            profile: Arc::new(profile),
            runs: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            max_runs: max_runs.max(1),
        }
    }

    /// The compiled `[budgets.prices]` table.
    pub fn prices(&self) -> &Prices {
        &self.prices
    }

    /// The budgets this tracker keeps.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// Inference spans of the run whose cost could not be found ([`BudgetState::unpriced`]).
    pub fn unpriced(&self, run_key: &str) -> u64 {
        self.runs.get(run_key).map_or(0, |r| r.state.unpriced())
    }

    /// Adds a span's figures to its run; returns the budget detections it completes.
    pub fn observe(
        &self,
        span: &SpanContext<'_>,
        figures: SpanFigures<'_>,
        now: Instant,
    ) -> Vec<RunDetection> {
        if !self.runs.contains_key(span.run_key) && self.runs.len() >= self.max_runs {
            let mut by_age: Vec<(Instant, Arc<str>)> = self
                .runs
                .iter()
                .map(|r| (r.last_seen, r.key().clone()))
                .collect();
            by_age.sort();
            for (_, key) in by_age.into_iter().take((self.max_runs / 100).max(1)) {
                self.runs.remove(&key);
            }
        }
        let mut run = self
            .runs
            .entry(span.run_key.clone())
            .or_insert_with(|| RunBudget {
                state: BudgetState::default(),
                detections: Vec::new(),
                last_seen: now,
            });
        run.last_seen = now;
        let exceeded = run.state.observe(&self.budgets, figures);
        let severity = match self.profile.action {
            crate::detector::Action::Warn => Severity::Warn,
            crate::detector::Action::Kill | crate::detector::Action::RequireApproval => {
                Severity::Kill
            }
        };
        let calls = run.state.tool_calls() as usize;
        let found: Vec<RunDetection> = exceeded
            .into_iter()
            .map(|e| RunDetection {
                profile_index: usize::MAX,
                profile: self.profile.clone(),
                detection: Arc::new(Detection {
                    pattern: Pattern::BudgetExceeded,
                    tool_names: e.tool.iter().cloned().collect(),
                    count: e.value as usize,
                    window: 0,
                    severity,
                    fingerprints: Vec::new(),
                    members: Vec::new(),
                    call: figures.tool_name.map(|_| calls),
                    response: None,
                    budget: Some(e),
                }),
                run_key: span.run_key.clone(),
                trace_id: span.trace_id.into(),
                span_id: span.span_id.into(),
                span_ids: Arc::new([]),
                time_unix_nano: figures.end_time_unix_nano,
                occurrence: 1,
                service_name: span.service_name.clone(),
                agent_name: span.agent_name.clone(),
            })
            .collect();
        run.detections.extend(found.iter().cloned());
        found
    }

    /// Each set budget with the run's figure so far and its limit
    /// ([`BudgetState::standing`]); empty for an unknown run.
    pub fn standing(&self, run_key: &str) -> Vec<Exceeded> {
        self.runs
            .get(run_key)
            .map(|r| r.state.standing(&self.budgets))
            .unwrap_or_default()
    }

    /// The keys of every run with figures.
    pub fn run_keys(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.key().to_string()).collect()
    }

    /// The budget detections of a run so far.
    pub fn detections(&self, run_key: &str) -> Vec<RunDetection> {
        self.runs
            .get(run_key)
            .map(|r| r.detections.clone())
            .unwrap_or_default()
    }
}
