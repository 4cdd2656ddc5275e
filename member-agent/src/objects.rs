//! The kinds the agent applies and cleans up, by group, version, kind and plural.

use kube::api::{ApiResource, GroupVersionKind};

use trainer_render::Object;

/// (group, version, kind, plural) of each kind render makes besides the JobSet: PodGroups of the
/// four gang schedulers, the MPI ConfigMap and Secret.
pub(crate) const COMPANIONS: [(&str, &str, &str, &str); 6] = [
    ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
    ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
    ("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups"),
];

pub(crate) fn api_resource((group, version, kind, plural): (&str, &str, &str, &str)) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub(crate) fn resource_of(o: &Object) -> ApiResource {
    api_resource(match o {
        Object::JobSet(_) => ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        Object::Coscheduling(_) => COMPANIONS[0],
        Object::Volcano(_) => COMPANIONS[1],
        Object::Kai(_) => COMPANIONS[2],
        Object::Native(_) => COMPANIONS[5],
        Object::ConfigMap(_) => COMPANIONS[3],
        Object::Secret(_) => COMPANIONS[4],
    })
}
