//! The engine event stream (`architecture.md` §7): step started and
//! finished, diagnostics, and the summary. The CLI renders it as a progress
//! display or as JSON lines.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::model::state::Category;
use crate::model::StepKind;
use crate::model::Urn;

/// One engine event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum EngineEvent {
    /// A step began.
    StepStarted {
        /// The step's kind.
        kind: StepKind,
        /// The resource.
        urn: Urn,
        /// The entry's category (`resource`, `data-source`, `action`).
        category: Category,
        /// Whether the entry is composite (a component).
        composite: bool,
        /// What it changes: the changed and replace-causing input keys
        /// (updates and replaces), and with `--diff` the changed values,
        /// secrets masked (`plan::diff`).
        #[serde(flatten)]
        diff: Option<Box<crate::model::step::StepDiff>>,
    },
    /// A step ended.
    StepFinished {
        /// The step's kind.
        kind: StepKind,
        /// The resource.
        urn: Urn,
        /// The entry's category (`resource`, `data-source`, `action`).
        category: Category,
        /// Whether the entry is composite (a component).
        composite: bool,
        /// How long it took.
        #[serde(rename = "durationMs")]
        duration_ms: f64,
        /// The error, if it failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A message for the user.
    Diagnostic {
        /// `debug`, `info`, `warning` or `error` (the CLI shows `debug`
        /// only with `--debug` or `-v`).
        severity: String,
        /// The resource it concerns, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        urn: Option<Urn>,
        /// The message.
        message: String,
    },
    /// A component migration was committed (in a preview: in memory).
    Migration {
        /// The registration that carried the callbacks.
        urn: Urn,
        /// URNs in the result that were not in the prior subtree.
        added: Vec<Urn>,
        /// The committed successor map (original -> final).
        successors: BTreeMap<Urn, Urn>,
    },
    /// The operation ended.
    Summary(Summary),
}

/// A failed step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepFailure {
    /// The resource.
    pub urn: Urn,
    /// The step's kind.
    pub kind: StepKind,
    /// What went wrong.
    pub message: String,
}

/// What an operation did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// `succeeded` or `failed`.
    pub result: String,
    /// Steps completed, per kind.
    pub steps: BTreeMap<StepKind, usize>,
    /// Failed steps and operation errors.
    pub failures: Vec<StepFailure>,
    /// Errors not tied to a step (planning, program, persistence).
    pub errors: Vec<String>,
    /// The rules of rejected component migrations (`migrations.md`),
    /// written as their ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<crate::model::rule::Rule>,
    /// What served each package the operation used (`simulated`,
    /// `plugin`, `builtin`, `embedded`): a simulated deployment never
    /// passes for a real one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub served: BTreeMap<String, String>,
    /// Wall time in milliseconds.
    #[serde(rename = "durationMs")]
    pub duration_ms: f64,
}

impl Summary {
    /// The count of completed steps of a kind.
    pub fn count(&self, kind: StepKind) -> usize {
        self.steps.get(&kind).copied().unwrap_or(0)
    }

    /// True when nothing failed.
    pub fn succeeded(&self) -> bool {
        self.failures.is_empty() && self.errors.is_empty()
    }
}

/// Where events go (none: dropped).
#[derive(Debug, Clone, Default)]
pub struct EventSink(Option<UnboundedSender<EngineEvent>>);

impl EventSink {
    /// A sink sending to a channel.
    pub fn new(tx: UnboundedSender<EngineEvent>) -> Self {
        Self(Some(tx))
    }

    /// Sends an event (dropped when nobody listens).
    pub fn send(&self, e: EngineEvent) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(e);
        }
    }

    /// True when someone listens.
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }
}

/// How many items a summarized warning lists by name.
pub const LISTED: usize = 3;

/// `n <what>s (first, second, third and n-3 more)`: one line for a list of
/// items however long (warnings about many resources).
pub fn summarize(what: &str, items: &[String]) -> String {
    let n = items.len();
    let noun = if n == 1 {
        what.to_owned()
    } else {
        format!("{what}s")
    };
    let mut listed = items[..n.min(LISTED)].join(", ");
    if n > LISTED {
        listed.push_str(&format!(" and {} more", n - LISTED));
    }
    format!("{n} {noun} ({listed})")
}
