//! Kinds of nodes and what a pod set asks of them: a node class is the node labels and taints
//! that matter for scheduling (as a member reports them); a [`NodeRequirement`] is a pod set's
//! node selector, required node affinity and tolerations, with Kubernetes' semantics. A pod set
//! may use a class only when its requirement admits it, so a gang is placed only where its
//! pods can bind.

use std::collections::BTreeMap;
use std::fmt;

/// The labels and taints that set a group of nodes apart. The default (none) is a plain node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeClass {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl NodeClass {
    pub fn is_plain(&self) -> bool {
        self.labels.is_empty() && self.taints.is_empty()
    }
}

/// Taint effects that keep pods off a node (`PreferNoSchedule` only steers, and is not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaintEffect {
    NoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

/// A pod's toleration. `key: None` with `Exists` tolerates every taint; `effect: None` every
/// effect.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: TolerationOperator,
    pub effect: Option<TaintEffect>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal(String),
    Exists,
}

impl Toleration {
    fn tolerates(&self, t: &Taint) -> bool {
        self.effect.is_none_or(|e| e == t.effect)
            && match (&self.key, &self.operator) {
                (None, TolerationOperator::Exists) => true,
                (None, TolerationOperator::Equal(_)) => false,
                (Some(k), TolerationOperator::Exists) => *k == t.key,
                (Some(k), TolerationOperator::Equal(v)) => *k == t.key && *v == t.value,
            }
    }
}

/// One node selector requirement (`matchExpressions` of a node selector term).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelMatch {
    pub key: String,
    pub operator: MatchOperator,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MatchOperator {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

impl LabelMatch {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let number = || value.and_then(|v| v.parse::<i64>().ok());
        match &self.operator {
            MatchOperator::In(vs) => value.is_some_and(|v| vs.contains(v)),
            MatchOperator::NotIn(vs) => value.is_none_or(|v| !vs.contains(v)),
            MatchOperator::Exists => value.is_some(),
            MatchOperator::DoesNotExist => value.is_none(),
            MatchOperator::Gt(n) => number().is_some_and(|v| v > *n),
            MatchOperator::Lt(n) => number().is_some_and(|v| v < *n),
        }
    }
}

impl fmt::Display for LabelMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        match &self.operator {
            MatchOperator::In(vs) if vs.len() == 1 => write!(f, "{k}={}", vs[0]),
            MatchOperator::In(vs) => write!(f, "{k} in ({})", vs.join(",")),
            MatchOperator::NotIn(vs) => write!(f, "{k} notin ({})", vs.join(",")),
            MatchOperator::Exists => write!(f, "{k}"),
            MatchOperator::DoesNotExist => write!(f, "!{k}"),
            MatchOperator::Gt(n) => write!(f, "{k}>{n}"),
            MatchOperator::Lt(n) => write!(f, "{k}<{n}"),
        }
    }
}

/// What a pod set's pods ask of a node. The default asks nothing (and tolerates no taint); it
/// is one null pointer, so the many pod sets that ask nothing (every simulated one) stay small.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeRequirement(Option<Box<Terms>>);

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Terms {
    /// `nodeSelector`: every label, exactly.
    selector: BTreeMap<String, String>,
    /// Required node affinity: any one term, each of whose matches all hold. Empty: none.
    affinity: Vec<Vec<LabelMatch>>,
    tolerations: Vec<Toleration>,
}

impl NodeRequirement {
    pub fn new(
        selector: BTreeMap<String, String>,
        affinity: Vec<Vec<LabelMatch>>,
        tolerations: Vec<Toleration>,
    ) -> NodeRequirement {
        let terms = Terms { selector, affinity, tolerations };
        NodeRequirement((terms != Terms::default()).then(|| Box::new(terms)))
    }

    /// Whether pods with this requirement can bind to nodes of `class`.
    pub fn admits(&self, class: &NodeClass) -> bool {
        let Some(t) = &self.0 else { return class.taints.is_empty() };
        t.selector.iter().all(|(k, v)| class.labels.get(k) == Some(v))
            && (t.affinity.is_empty() || t.affinity.iter().any(|term| term.iter().all(|m| m.matches(&class.labels))))
            && class.taints.iter().all(|taint| t.tolerations.iter().any(|tol| tol.tolerates(taint)))
    }

    /// The same requirement without its tolerations.
    pub fn without_tolerations(&self) -> NodeRequirement {
        let t = self.0.as_deref().cloned().unwrap_or_default();
        NodeRequirement::new(t.selector, t.affinity, Vec::new())
    }
}

/// What nodes it takes, as users wrote it: `matching node-type=training` (terms joined by
/// ` or `), or `whose taints it tolerates` when it asks no labels (then only taints it does
/// not tolerate can have excluded nodes).
impl fmt::Display for NodeRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(t) = self.0.as_deref().filter(|t| !t.selector.is_empty() || !t.affinity.is_empty()) else {
            return f.write_str("whose taints it tolerates");
        };
        f.write_str("matching ")?;
        let selector: Vec<String> = t.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let terms: Vec<String> =
            t.affinity.iter().map(|t| t.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")).collect();
        let mut text = selector.join(",");
        if !terms.is_empty() {
            if !text.is_empty() {
                text.push_str(" and ");
            }
            text.push_str(&terms.join(" or "));
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(labels: &[(&str, &str)], taints: &[(&str, &str, TaintEffect)]) -> NodeClass {
        NodeClass {
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            taints: taints
                .iter()
                .map(|(k, v, e)| Taint { key: k.to_string(), value: v.to_string(), effect: *e })
                .collect(),
        }
    }

    #[test]
    fn selectors_affinity_and_tolerations_as_kubernetes_reads_them() {
        let training = class(&[("node-type", "training")], &[]);
        let dedicated = class(&[("node-type", "training")], &[("dedicated", "ml", TaintEffect::NoSchedule)]);
        let plain = NodeClass::default();
        let any = NodeRequirement::default();
        assert!(any.admits(&plain) && any.admits(&training) && !any.admits(&dedicated), "no toleration: not tainted");

        let selector =
            NodeRequirement::new([("node-type".to_string(), "training".to_string())].into(), Vec::new(), Vec::new());
        assert!(selector.admits(&training) && !selector.admits(&plain));
        assert_eq!(selector.to_string(), "matching node-type=training");

        let tolerate = |key: Option<&str>, operator, effect| {
            NodeRequirement::new(
                BTreeMap::new(),
                Vec::new(),
                vec![Toleration { key: key.map(str::to_string), operator, effect }],
            )
        };
        let eq = |v: &str| TolerationOperator::Equal(v.to_string());
        assert!(tolerate(Some("dedicated"), eq("ml"), Some(TaintEffect::NoSchedule)).admits(&dedicated));
        assert!(tolerate(Some("dedicated"), TolerationOperator::Exists, None).admits(&dedicated));
        assert!(tolerate(None, TolerationOperator::Exists, None).admits(&dedicated), "tolerates everything");
        assert!(!tolerate(Some("dedicated"), eq("web"), None).admits(&dedicated));
        assert!(!tolerate(Some("dedicated"), eq("ml"), Some(TaintEffect::NoExecute)).admits(&dedicated));

        let m = |key: &str, operator| LabelMatch { key: key.into(), operator };
        let affinity = NodeRequirement::new(
            BTreeMap::new(),
            vec![
                vec![m("node-type", MatchOperator::In(vec!["training".into(), "batch".into()]))],
                vec![m("zone", MatchOperator::Exists), m("gen", MatchOperator::Gt(3))],
            ],
            Vec::new(),
        );
        assert!(affinity.admits(&training) && !affinity.admits(&plain));
        assert!(affinity.admits(&class(&[("zone", "a"), ("gen", "4")], &[])));
        assert!(!affinity.admits(&class(&[("zone", "a"), ("gen", "3")], &[])));
        assert_eq!(affinity.to_string(), "matching node-type in (training,batch) or zone,gen>3");
        let not_in = NodeRequirement::new(
            BTreeMap::new(),
            vec![vec![m("node-type", MatchOperator::NotIn(vec!["training".into()]))]],
            Vec::new(),
        );
        assert!(not_in.admits(&plain) && !not_in.admits(&training));
    }
}
