//! Reading Kubernetes conditions (`metav1.Condition`) by type, as every status here is read:
//! a JobSet's, a Workload's, a MemberCluster's, a TrainJob's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The condition of type `type_`, if `conditions` holds one.
pub fn find<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The condition of type `type_`, if `conditions` hold one with status True.
pub fn find_true<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    find(conditions, type_).filter(|c| c.status == "True")
}

/// Whether `conditions` hold `type_` with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find_true(conditions, type_).is_some()
}
