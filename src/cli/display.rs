//! Rendering an operation's engine events (`cli.md` §1).
//!
//! Three styles:
//! - [`Style::Live`] (stderr is a terminal): an `indicatif` display with
//!   resources done / total and elapsed time, and one spinner per step in
//!   flight (kind, URN, elapsed); each finished step leaves a line above.
//! - [`Style::Plain`] (not a terminal): one line per finished step on
//!   stdout, diagnostics on stderr.
//! - [`Style::Json`] (`--json`): each engine event as one JSON object per
//!   line on stdout, exactly as the engine emits it; the last line is the
//!   summary.
//!
//! Outside JSON, a summary table (steps per kind) ends the operation. With
//! `--diff` ([`Display::with_diffs`]) each finished step that changes
//! inputs is followed by its property diff, modelled on `pulumi preview
//! --diff`: `+ key: value`, `- key: value`, `~ key: old => new`, with
//! `(replace)` after a change that forces the replacement; secrets show as
//! `[secret]` (the engine masks them before the event is sent).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::events::{EngineEvent, Summary};
use crate::model::property::Secret;
use crate::model::step::StepKind;
use crate::model::{PropertyMap, PropertyValue, Urn};
use crate::plan::diff::{ChangeKind, StepDiff};

/// How events are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// JSON lines on stdout.
    Json,
    /// A live progress display on stderr.
    Live,
    /// Plain lines.
    Plain,
}

impl Style {
    /// JSON when asked, else live when stderr is a terminal, else plain.
    pub fn choose(json: bool) -> Self {
        if json {
            Self::Json
        } else if std::io::stderr().is_terminal() {
            Self::Live
        } else {
            Self::Plain
        }
    }
}

/// Writes one line to stdout, ignoring a closed pipe (`keel ... | head`).
pub fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Text from outside keel (a name, type, ID or value) made safe to print
/// on a terminal: every control character, line breaks included, shows as
/// its `\u{..}` escape, so an ANSI sequence is seen rather than obeyed.
pub fn clean(s: &str) -> Cow<'_, str> {
    escape(s, |c| c.is_control())
}

/// [`clean`] for a message whose line breaks are meant (an error with the
/// end of a callback's stderr): control characters other than `\n`.
pub fn clean_text(s: &str) -> Cow<'_, str> {
    escape(s, |c| c.is_control() && c != '\n')
}

fn escape(s: &str, bad: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if bad(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A duration in milliseconds, for people.
pub fn format_ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}

struct Live {
    multi: MultiProgress,
    main: ProgressBar,
    steps: HashMap<(StepKind, Urn), ProgressBar>,
    step_style: ProgressStyle,
}

/// Renders the events of one operation.
pub struct Display {
    style: Style,
    operation: &'static str,
    live: Option<Live>,
    done: HashSet<Urn>,
    total: usize,
    debug: bool,
    /// Show property diffs (`--diff`).
    diffs: bool,
    /// The diffs of steps in flight, shown when they finish.
    pending: HashMap<(StepKind, Urn), Box<StepDiff>>,
}

impl std::fmt::Debug for Display {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Display")
            .field("style", &self.style)
            .field("operation", &self.operation)
            .field("done", &self.done.len())
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

/// How often spinners and elapsed times redraw.
const TICK: Duration = Duration::from_millis(50);

impl Display {
    /// A display for `operation` (`update`, `preview`, ...) expecting about
    /// `total` resources.
    pub fn new(style: Style, operation: &'static str, total: usize) -> Self {
        let live = (style == Style::Live).then(|| {
            let multi = MultiProgress::new();
            let main_style = ProgressStyle::with_template(
                "{spinner:.green} {prefix:.bold} [{elapsed_precise}] [{bar:30.cyan/blue}] {pos}/{len} resources",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            let main = multi.add(ProgressBar::new(total as u64).with_style(main_style));
            main.set_prefix(operation);
            main.enable_steady_tick(TICK);
            let step_style = ProgressStyle::with_template("  {spinner:.cyan} {msg} {ms:.dim}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .with_key(
                    "ms",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}", format_ms(state.elapsed().as_secs_f64() * 1000.0));
                    },
                );
            Live {
                multi,
                main,
                steps: HashMap::new(),
                step_style,
            }
        });
        Self {
            style,
            operation,
            live,
            done: HashSet::new(),
            total,
            debug: false,
            diffs: false,
            pending: HashMap::new(),
        }
    }

    /// Shows `debug` diagnostics too (`--debug`, `-v`); they are hidden
    /// otherwise, in every style.
    pub fn show_debug(mut self, show: bool) -> Self {
        self.debug = show;
        self
    }

    /// Shows each step's property diff after its line (`--diff`).
    pub fn with_diffs(mut self, diffs: bool) -> Self {
        self.diffs = diffs;
        self
    }

    /// The style.
    pub fn style(&self) -> Style {
        self.style
    }

    /// A diagnostic not from the engine (a warning from opening the stack).
    pub fn diagnostic(&mut self, severity: &str, message: &str) {
        self.event(&EngineEvent::Diagnostic {
            severity: severity.to_owned(),
            urn: None,
            message: message.to_owned(),
        });
    }

    fn note(&self, line: &str) {
        match &self.live {
            Some(l) => {
                let _ = l.multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// Shows one event.
    pub fn event(&mut self, e: &EngineEvent) {
        if !self.debug
            && matches!(e, EngineEvent::Diagnostic { severity, .. } if severity == "debug")
        {
            return;
        }
        if self.style == Style::Json {
            // Serializing an event cannot fail: keys are strings, numbers
            // finite.
            if let Ok(line) = serde_json::to_string(e) {
                out(&line);
            }
            return;
        }
        match e {
            EngineEvent::StepStarted {
                kind, urn, diff, ..
            } => {
                if let (true, Some(d)) = (self.diffs, diff) {
                    self.pending.insert((*kind, urn.clone()), d.clone());
                }
                if let Some(l) = &mut self.live {
                    let bar = l.multi.insert_before(
                        &l.main,
                        ProgressBar::new_spinner().with_style(l.step_style.clone()),
                    );
                    bar.set_message(format!("{:<18} {}", kind.as_str(), clean(urn.as_str())));
                    bar.enable_steady_tick(TICK);
                    l.steps.insert((*kind, urn.clone()), bar);
                }
            }
            EngineEvent::StepFinished {
                kind,
                urn,
                duration_ms,
                error,
                ..
            } => {
                self.done.insert(urn.clone());
                let shown = clean(urn.as_str());
                let diff_lines = self
                    .pending
                    .remove(&(*kind, urn.clone()))
                    .map(|d| diff_lines(&d))
                    .unwrap_or_default();
                let line = match error {
                    None => format!(
                        "{:<18} {shown} ({})",
                        kind.as_str(),
                        format_ms(*duration_ms)
                    ),
                    Some(err) => format!(
                        "{:<18} {shown} FAILED: {}",
                        kind.as_str(),
                        clean_text(short_error(*kind, urn, err))
                    ),
                };
                match &mut self.live {
                    Some(l) => {
                        if let Some(bar) = l.steps.remove(&(*kind, urn.clone())) {
                            bar.finish_and_clear();
                            l.multi.remove(&bar);
                        }
                        // Count first: printing redraws every bar.
                        let done = self.done.len() as u64;
                        if done > l.main.length().unwrap_or(0) {
                            l.main.set_length(done);
                        }
                        l.main.set_position(done);
                        let mark = if error.is_some() { "✗" } else { "✓" };
                        let _ = l.multi.println(format!("{mark} {line}"));
                        for d in &diff_lines {
                            let _ = l.multi.println(d);
                        }
                    }
                    None => {
                        out(&line);
                        for d in &diff_lines {
                            out(d);
                        }
                    }
                }
            }
            EngineEvent::Diagnostic {
                severity,
                urn,
                message,
            } => {
                let (severity, message) = (clean(severity), clean_text(message));
                let line = match urn {
                    Some(u) => format!("{severity}: {}: {message}", clean(u.as_str())),
                    None => format!("{severity}: {message}"),
                };
                self.note(&line);
            }
            EngineEvent::Migration {
                urn,
                added,
                successors,
            } => {
                // A rename's new URN is not a new resource.
                let new = added
                    .iter()
                    .filter(|u| !successors.values().any(|to| to == *u))
                    .count();
                let mut line = format!(
                    "migration of {}: {} renamed, {new} added",
                    clean(urn.as_str()),
                    successors.len(),
                );
                for (from, to) in successors {
                    line.push_str(&format!(
                        "\n  {} -> {}",
                        clean(from.as_str()),
                        clean(to.as_str())
                    ));
                }
                self.note(&line);
            }
            EngineEvent::Summary(_) => {}
        }
    }

    /// Ends the display; outside JSON, prints the summary table.
    pub fn finish(&mut self, summary: Option<&Summary>) {
        if let Some(l) = self.live.take() {
            for (_, bar) in l.steps {
                bar.finish_and_clear();
            }
            // The total was an estimate (renamed resources count twice):
            // a finished operation shows what it did.
            let done = self.done.len() as u64;
            if summary.is_some_and(Summary::succeeded) {
                l.main.set_length(done);
            }
            l.main.set_position(done);
            l.main.abandon();
            drop(l.multi);
        }
        if self.style == Style::Json {
            return;
        }
        if let Some(s) = summary {
            for line in summary_table(self.operation, s) {
                out(&line);
            }
        }
    }
}

/// The lines of a step's property diff: `+ path: new`, `- path: old`,
/// `~ path: old => new`, `(replace)` marking a change that forces the
/// replacement. Values are the engine's masked renderings, as compact JSON.
pub fn diff_lines(d: &StepDiff) -> Vec<String> {
    let show = |v: &Option<serde_json::Value>| {
        v.as_ref()
            .map_or_else(|| "null".to_owned(), |v| clean(&v.to_string()).into_owned())
    };
    d.detailed
        .iter()
        .map(|c| {
            let path = clean(&c.path);
            let mut line = match c.kind {
                _ if c.hidden => format!("    ~ {path} (hidden)"),
                ChangeKind::Add => format!("    + {path}: {}", show(&c.new)),
                ChangeKind::Delete => format!("    - {path}: {}", show(&c.old)),
                ChangeKind::Update => {
                    format!("    ~ {path}: {} => {}", show(&c.old), show(&c.new))
                }
            };
            if c.replace {
                line.push_str(" (replace)");
            }
            line
        })
        .collect()
}

/// A step's error without the `<kind> of <URN> failed: ` prefix that
/// repeats what the line already says.
pub fn short_error<'a>(kind: StepKind, urn: &Urn, err: &'a str) -> &'a str {
    let prefix = format!("{} of {urn} failed: ", kind.as_str());
    err.strip_prefix(prefix.as_str()).unwrap_or(err)
}

/// The summary table: the result, then the steps per kind.
pub fn summary_table(operation: &str, s: &Summary) -> Vec<String> {
    let mut lines = vec![format!(
        "{operation} {} in {}",
        s.result,
        format_ms(s.duration_ms)
    )];
    if s.steps.is_empty() {
        lines.push("  (no steps)".into());
    }
    let mut total = 0;
    for (kind, n) in &s.steps {
        total += n;
        lines.push(format!("  {:<20} {n:>5}", kind.as_str()));
    }
    if s.steps.len() > 1 {
        lines.push(format!("  {:<20} {total:>5}", "total"));
    }
    // Who served the packages, real or simulated, never left to guess.
    let shown: Vec<String> = s
        .served
        .iter()
        .filter(|(_, how)| how.as_str() != "builtin")
        .map(|(pkg, how)| match how.as_str() {
            "plugin" => format!("{pkg} (plugin: real)"),
            "simulated" => format!("{pkg} (simulated: nothing real)"),
            other => format!("{pkg} ({other})"),
        })
        .collect();
    if !shown.is_empty() {
        lines.push(format!("  packages: {}", shown.join(", ")));
    }
    lines
}

/// A property value for people: secrets masked, unknowns marked, the rest
/// as compact JSON (strings bare, [`clean`]ed; JSON escapes control
/// characters itself).
pub fn show_value(v: &PropertyValue) -> String {
    match v {
        PropertyValue::String(s) => clean(s).into_owned(),
        PropertyValue::Secret(_) => "[secret]".into(),
        PropertyValue::Computed => "(unknown until the update)".into(),
        other => mask(other).to_json().to_string(),
    }
}

/// The value with every secret replaced by `"[secret]"`.
pub fn mask(v: &PropertyValue) -> PropertyValue {
    match v {
        PropertyValue::Secret(Secret::Plaintext(_) | Secret::Ciphertext(_)) => {
            PropertyValue::String("[secret]".into())
        }
        PropertyValue::Array(a) => PropertyValue::Array(a.iter().map(mask).collect()),
        PropertyValue::Object(m) => PropertyValue::Object(mask_map(m)),
        other => other.clone(),
    }
}

/// [`mask`] over a map.
pub fn mask_map(m: &PropertyMap) -> PropertyMap {
    m.iter().map(|(k, v)| (k.clone(), mask(v))).collect()
}
