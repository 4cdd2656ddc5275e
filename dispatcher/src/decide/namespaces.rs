//! Which namespaces may use which Queue: each Queue's `spec.namespaceSelector`, read once per
//! cycle, against the namespaces' labels (as Kueue's ClusterQueue `namespaceSelector`). Without
//! it a TrainJob could name any team's queue and spend its quota.

use std::collections::BTreeMap;

use api::kueue::ClusterQueue;
use api::stowage::Queue;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The label the API server sets on every namespace: its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A Queue's namespace selector, parsed: every requirement must hold (an empty selector
/// selects every namespace).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Selector(Vec<Requirement>);

impl Selector {
    /// The Queue's selector; `None` when it has none (every namespace may use it). The error
    /// names the field.
    pub(super) fn of(q: &Queue) -> Result<Option<Selector>, String> {
        q.spec.namespace_selector.as_ref().map(parse).transpose()
    }

    /// A Kueue ClusterQueue's selector: as a Queue's, but none selects no namespace (Kueue's
    /// nil selector), so a ClusterQueue without one admits nothing until it says `{}`.
    pub(super) fn of_cluster_queue(cq: &ClusterQueue) -> Result<Selector, String> {
        match &cq.spec.namespace_selector {
            Some(s) => parse(s),
            None => Ok(Selector(vec![Requirement::In(NAME_LABEL.into(), Vec::new())])),
        }
    }

    pub(super) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

fn parse(s: &LabelSelector) -> Result<Selector, String> {
    let mut reqs: Vec<Requirement> =
        s.match_labels.iter().flatten().map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()])).collect();
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let field = format!("spec.namespaceSelector.matchExpressions[{i}]");
        let values = e.values.clone().unwrap_or_default();
        let key = e.key.clone();
        reqs.push(match (e.operator.as_str(), values.is_empty()) {
            ("In", false) => Requirement::In(key, values),
            ("NotIn", false) => Requirement::NotIn(key, values),
            ("Exists", true) => Requirement::Exists(key),
            ("DoesNotExist", true) => Requirement::DoesNotExist(key),
            ("In" | "NotIn", true) => return Err(format!("{field}.values: must be non-empty for {}", e.operator)),
            ("Exists" | "DoesNotExist", false) => {
                return Err(format!("{field}.values: must be empty for {}", e.operator));
            }
            (other, _) => {
                return Err(format!(
                    "{field}.operator: {other:?} is not one of \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
                ));
            }
        });
    }
    Ok(Selector(reqs))
}

/// Every namespace's labels, with the name label the API server guarantees.
pub(super) fn labels(namespaces: &[Namespace]) -> BTreeMap<String, BTreeMap<String, String>> {
    namespaces
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let mut labels = n.metadata.labels.clone().unwrap_or_default();
            labels.insert(NAME_LABEL.into(), name.clone());
            Some((name, labels))
        })
        .collect()
}

/// The labels of namespace `name`, or only its name label when it is not (yet) observed.
pub(super) fn of<'l>(
    all: &'l BTreeMap<String, BTreeMap<String, String>>,
    name: &str,
) -> std::borrow::Cow<'l, BTreeMap<String, String>> {
    match all.get(name) {
        Some(l) => std::borrow::Cow::Borrowed(l),
        None => std::borrow::Cow::Owned([(NAME_LABEL.to_string(), name.to_string())].into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn queue(selector: serde_json::Value) -> Queue {
        serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "q"}, "spec": {"namespaceSelector": selector}}))
        .expect("queue")
    }

    fn ns(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
        labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_selector_reads_as_kubernetes_label_selectors_do() {
        let s = Selector::of(&queue(json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["dev"]},
                                 {"key": "gpu", "operator": "Exists"}]})))
        .expect("valid")
        .expect("some");
        assert!(s.matches(&ns(&[("team", "a"), ("gpu", "yes")])));
        assert!(!s.matches(&ns(&[("team", "a"), ("gpu", "yes"), ("tier", "dev")])));
        assert!(!s.matches(&ns(&[("team", "b"), ("gpu", "yes")])));
        assert!(!s.matches(&ns(&[("team", "a")])));
        assert!(Selector::of(&queue(json!({}))).expect("valid").expect("some").matches(&ns(&[])), "empty: all");
    }

    #[test]
    fn a_bad_selector_names_the_field() {
        let bad =
            Selector::of(&queue(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]})));
        assert_eq!(
            bad.expect_err("invalid"),
            "spec.namespaceSelector.matchExpressions[0].operator: \"Equals\" is not one of \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
        );
        let empty = Selector::of(&queue(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})));
        assert_eq!(
            empty.expect_err("invalid"),
            "spec.namespaceSelector.matchExpressions[0].values: must be non-empty for In"
        );
    }
}
