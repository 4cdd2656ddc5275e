//! Namespaces as the write path keeps them: a namespaced object needs its namespace, and a
//! namespace deleted takes everything in it along (kube-controller-manager's namespace
//! controller, done at once here).

use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::view::ReadView;

/// Whether a write of `rt` in `ns` may go ahead: a namespaced kind needs a namespace, and that
/// namespace must exist.
pub(crate) fn check(view: ReadView<'_>, rt: &ResourceType, ns: Option<&str>) -> Result<(), ApiError> {
    match (rt.namespaced, ns) {
        (true, None) => {
            Err(ApiError::bad_request(format!("{} is namespaced: the request needs a namespace", rt.plural)))
        }
        (true, Some(n)) if !view.contains(&(String::new(), "namespaces".into()), &(String::new(), n.to_string())) => {
            Err(ApiError::not_found("namespaces", n))
        }
        _ => Ok(()),
    }
}

/// Every object in namespace `ns`: (group, plural) and (namespace, name).
pub(crate) fn contents(view: ReadView<'_>, ns: &str) -> Vec<((String, String), (String, String))> {
    view.keys().filter(|(_, key)| key.0 == ns).map(|(store, key)| (store.clone(), key.clone())).collect()
}
