//! Garbage collection by owner references, as kube-controller-manager's garbage collector does
//! it with background propagation: an object whose owner is gone is deleted.

use serde_json::Value;

use crate::view::ReadView;

/// Every object naming `owner_uid` among its owner references: (group, plural) and (namespace,
/// name).
pub(crate) fn dependents(view: ReadView<'_>, owner_uid: &str) -> Vec<((String, String), (String, String))> {
    view.all()
        .filter(|(_, _, obj)| {
            obj["metadata"]
                .get("ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid)))
        })
        .map(|(store, key, _)| (store.clone(), key.clone()))
        .collect()
}
