//! YAML in and out, for every Stowage loader (fleet files, `stowage render` input, the hub's
//! YAML request bodies, the tests' manifests): one parse budget, refused before it costs
//! anything, and errors as `LINE: FIELD: PROBLEM` for the caller to put its file name before.
//!
//! The reader is serde-saphyr: its parser counts as it goes (nodes, nesting, aliases, anchors,
//! scalar bytes, documents) and stops at the first breach, so an alias bomb ("billion laughs")
//! or 100,000 levels of nesting costs at most what the budget allows, not memory or time
//! proportional to what it would expand to. YAML 1.2 scalars, as the reader it replaces
//! (serde_yaml 0.9) had them: `yes`, `on` and `n` are strings, not booleans.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, DeserializeError, MessageFormatter};

/// Nesting of mappings and sequences. The deepest objects read (CRD schemas, runtimes holding a
/// JobSet holding pod templates) nest about 40 levels; serde_json refuses JSON past 128.
pub const MAX_DEPTH: usize = 128;
/// Nodes (mappings, sequences, scalars) in one stream, aliases counted each time they are used:
/// a CRD is about 30,000.
pub const MAX_NODES: usize = 250_000;
/// Alias uses (`*name`). Kubernetes objects seldom use any.
pub const MAX_ALIASES: usize = 1_000;
/// Anchor definitions (`&name`).
pub const MAX_ANCHORS: usize = 1_000;
/// Events that alias uses may replay in all: what one alias bomb can expand to before it is
/// refused.
pub const MAX_ALIAS_REPLAYED_EVENTS: usize = 100_000;
/// Documents in one stream.
pub const MAX_DOCUMENTS: usize = 1_024;
/// Bytes of all scalars together: the largest YAML file read.
pub const MAX_SCALAR_BYTES: usize = crate::MAX_YAML_FILE_BYTES as usize;

/// Why YAML text was refused: where (when known), which field (when known) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based, where the parser stopped.
    pub line: Option<u64>,
    /// `spec.trainer.numNodes`, `clusters[0].pools[1].nodes`; empty for the document itself.
    pub field: String,
    pub problem: String,
}

impl YamlError {
    /// Whether the parse budget refused the text (as opposed to a syntax or shape error).
    pub fn is_over_budget(&self) -> bool {
        self.problem.starts_with(OVER_BUDGET)
    }

    /// `FILE:LINE: FIELD: PROBLEM`, leaving out the line or the field where unknown.
    pub fn in_file(&self, file: &str) -> String {
        match self.line {
            Some(line) => format!("{file}:{line}: {self}"),
            None => format!("{file}: {self}"),
        }
    }
}

/// `FIELD: PROBLEM` (or `PROBLEM`): the caller adds the file and line ([`YamlError::in_file`]).
impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() { f.write_str(&self.problem) } else { write!(f, "{}: {}", self.field, self.problem) }
    }
}

impl std::error::Error for YamlError {}

const OVER_BUDGET: &str = "over the YAML budget: ";

/// The budget every read uses (see the constants above).
pub fn budget() -> Budget {
    serde_saphyr::budget! {
        max_depth: MAX_DEPTH,
        max_nodes: MAX_NODES,
        max_aliases: MAX_ALIASES,
        max_anchors: MAX_ANCHORS,
        max_documents: MAX_DOCUMENTS,
        max_total_scalar_bytes: MAX_SCALAR_BYTES,
        max_reader_input_bytes: Some(crate::MAX_YAML_FILE_BYTES as usize),
    }
    .unwrap_or_default()
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: Some(budget()),
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_ALIAS_REPLAYED_EVENTS,
        },
        // YAML 1.2's booleans only, as serde_yaml and Kubernetes' own reader (sigs.k8s.io/yaml
        // keeps `yes` a string in a string field) have them.
        strict_booleans: true,
        with_snippet: false,
    }
}

/// Reads one document into `T`, naming the field that does not fit.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut field = String::new();
    let result = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = path_text(e.path());
            e.into_inner()
        })
    });
    result.map_err(|e| {
        let mut error = error(&e, field);
        // "invalid i32" says what was expected but not what was found: the scalar, from the text.
        if let DeserializeError::InvalidScalar { ty, location } = original(&e) {
            let span = location.span();
            let found = match (span.byte_offset(), span.byte_len()) {
                (Some(at), Some(len)) => usize::try_from(at)
                    .ok()
                    .zip(usize::try_from(len).ok())
                    .and_then(|(at, len)| text.get(at..at.saturating_add(len))),
                _ => None,
            };
            error.problem = match found {
                Some(found) if found.len() <= 80 => format!("invalid type: expected {ty}, got {found:?}"),
                _ => format!("invalid type: expected {ty}"),
            };
        }
        error
    })
}

/// The error itself, without the snippet or alias context wrapped around it.
fn original(e: &DeserializeError) -> &DeserializeError {
    let mut inner = e.without_snippet();
    while let DeserializeError::AliasError { error, .. } | DeserializeError::WithSnippet { error, .. } = inner {
        inner = error;
    }
    inner
}

/// [`from_str`] on bytes that must be UTF-8 (a request body).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    let text = std::str::from_utf8(bytes).map_err(|e| YamlError {
        line: None,
        field: String::new(),
        problem: format!("not UTF-8 at byte {}", e.valid_up_to()),
    })?;
    from_str(text)
}

/// Reads a stream of documents (`---` between them), skipping empty ones.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(|e| error(&e, String::new()))
}

/// Writes YAML as `kubectl get -o yaml` reads it: block style, two-space indents, sequences at
/// their key's indent, strings on one line unless they hold line breaks (then `|`).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    let options = serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(value, options).map_err(|e| YamlError {
        line: None,
        field: String::new(),
        problem: e.to_string(),
    })
}

/// serde_path_to_error's `a.b[0].c`, with `.` for the root left out.
fn path_text(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

fn error(e: &DeserializeError, field: String) -> YamlError {
    let line = e.location().map(|l| l.line()).filter(|&l| l > 0);
    let problem = match original(e) {
        DeserializeError::Budget { breach, .. } => format!("{OVER_BUDGET}{}", breach_text(breach)),
        DeserializeError::AliasReplayLimitExceeded { max_total_replayed_events, .. } => format!(
            "{OVER_BUDGET}aliases expand to more than {max_total_replayed_events} events (MAX_ALIAS_REPLAYED_EVENTS)"
        ),
        DeserializeError::AliasReplayStackDepthExceeded { max_depth, .. } => {
            format!("{OVER_BUDGET}aliases nest more than {max_depth} deep")
        }
        other => serde_saphyr::DefaultMessageFormatter.format_message(other).into_owned(),
    };
    // The parser's own nesting guard (flow collections, `[[[...`) words itself as recursion.
    let problem = if problem.starts_with("recursion limit exceeded") {
        format!("{OVER_BUDGET}nested deeper than the parser allows")
    } else {
        problem
    };
    YamlError { line, field, problem }
}

fn breach_text(breach: &BudgetBreach) -> String {
    match breach {
        BudgetBreach::Depth { .. } => format!("nested more than {MAX_DEPTH} levels deep (MAX_DEPTH)"),
        BudgetBreach::Nodes { .. } => {
            format!("more than {MAX_NODES} nodes, aliases counted each time they are used (MAX_NODES)")
        }
        BudgetBreach::Aliases { .. } => format!("more than {MAX_ALIASES} aliases (MAX_ALIASES)"),
        BudgetBreach::Anchors { .. } => format!("more than {MAX_ANCHORS} anchors (MAX_ANCHORS)"),
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => {
            format!("{aliases} aliases of {anchors} anchors: an alias bomb")
        }
        BudgetBreach::Documents { .. } => format!("more than {MAX_DOCUMENTS} documents (MAX_DOCUMENTS)"),
        BudgetBreach::ScalarBytes { .. } => {
            format!("more than {MAX_SCALAR_BYTES} bytes of scalars (MAX_SCALAR_BYTES)")
        }
        BudgetBreach::InputBytes { .. } => {
            format!("more than {} bytes (MAX_YAML_FILE_BYTES)", crate::MAX_YAML_FILE_BYTES)
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_1_2_scalars_as_serde_yaml_read_them() {
        let v: serde_json::Value = from_str("a: yes\nb: on\nc: n\nd: 1.5\ne: ~\nf: '8'\ng: 8\n").expect("reads");
        assert_eq!(v, serde_json::json!({"a": "yes", "b": "on", "c": "n", "d": 1.5, "e": null, "f": "8", "g": 8}));
    }
}
