//! What admission and authorization read of the stored objects: a read-only view. The store
//! gives one; the policies and the RBAC authorizer take it, not the store, so they see the
//! objects as they stand and cannot write (kube-apiserver's admission reads through informers'
//! listers in the same way).

use serde_json::Value;

use crate::resources::ResourceType;

/// The types served and the objects stored, read-only.
pub trait View {
    /// The type served at `group`/`version`/`plural`, if any.
    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType>;
    /// Every stored object of `rt`, as stored, in key order.
    fn objects<'a>(&'a self, rt: &'a ResourceType) -> impl Iterator<Item = &'a Value> + 'a;
    /// One stored object, as stored.
    fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value>;
}
