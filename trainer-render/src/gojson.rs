//! JSON as Go's `encoding/json` writes a Kubernetes Go value: struct fields in declaration
//! order, `omitempty` zero values left out, map keys sorted, `<`, `>` and `&` escaped. Field
//! errors print complex bad values this way (`field.Error.ErrorBody`), so a denial names the
//! value exactly as Trainer's webhook would. The orders below are those of the Go structs
//! (`k8s.io/api` v0.36.2 `core/v1/types.go`, kubeflow/trainer v2.3.0
//! `pkg/apis/trainer/v1alpha1`); a nested type not listed here prints its keys sorted.

use kube_conventions::gojson::write_string;
use serde_json::Value;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Ty {
    /// Unknown shape: keys sorted (as Go prints maps).
    Any,
    List(&'static Ty),
    Obj(&'static [Field]),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    name: &'static str,
    ty: Ty,
    /// `omitempty` on a non-pointer field: "", 0, false, [] and {} are left out.
    omit_zero: bool,
}

const fn f(name: &'static str, ty: Ty) -> Field {
    Field { name, ty, omit_zero: true }
}

/// A pointer field, or one without `omitempty`: printed whenever present, even when zero.
const fn always(name: &'static str, ty: Ty) -> Field {
    Field { name, ty, omit_zero: false }
}

const A: Ty = Ty::Any;

pub(crate) const RUNTIME_REF: Ty = Ty::Obj(&[f("name", A), always("apiGroup", A), always("kind", A)]);

const LOCAL_OBJECT_REFERENCE: Ty = Ty::Obj(&[f("name", A)]);
const KEY_SELECTOR: Ty = Ty::Obj(&[f("name", A), always("key", A), always("optional", A)]);
const ENV_VAR_SOURCE: Ty = Ty::Obj(&[
    always("fieldRef", Ty::Obj(&[f("apiVersion", A), always("fieldPath", A)])),
    always("resourceFieldRef", Ty::Obj(&[f("containerName", A), always("resource", A), f("divisor", A)])),
    always("configMapKeyRef", KEY_SELECTOR),
    always("secretKeyRef", KEY_SELECTOR),
    always(
        "fileKeyRef",
        Ty::Obj(&[always("volumeName", A), always("path", A), always("key", A), always("optional", A)]),
    ),
]);
pub(crate) const ENV_VAR: Ty = Ty::Obj(&[always("name", A), f("value", A), always("valueFrom", ENV_VAR_SOURCE)]);
pub(crate) const ENV_VARS: Ty = Ty::List(&ENV_VAR);

pub(crate) const ENV_INJECTION_TARGET: Ty = Ty::Obj(&[f("jobName", A), f("containerNames", A)]);

pub(crate) const RESOURCES: Ty = Ty::Obj(&[
    f("limits", A),
    f("requests", A),
    f("claims", Ty::List(&Ty::Obj(&[always("name", A), always("request", A)]))),
]);

const OBJECT_META: Ty = Ty::Obj(&[
    f("name", A),
    f("generateName", A),
    f("namespace", A),
    f("selfLink", A),
    f("uid", A),
    f("resourceVersion", A),
    f("generation", A),
    f("creationTimestamp", A),
    always("deletionTimestamp", A),
    always("deletionGracePeriodSeconds", A),
    f("labels", A),
    f("annotations", A),
    f("ownerReferences", A),
    f("finalizers", A),
    f("managedFields", A),
]);

const KEY_TO_PATH: Ty = Ty::Obj(&[always("key", A), always("path", A), always("mode", A)]);
const VOLUME: Ty = Ty::Obj(&[
    always("name", A),
    always("hostPath", Ty::Obj(&[always("path", A), f("type", A)])),
    always("emptyDir", Ty::Obj(&[f("medium", A), always("sizeLimit", A)])),
    always("gcePersistentDisk", A),
    always("awsElasticBlockStore", A),
    always("gitRepo", A),
    f(
        "secret",
        Ty::Obj(&[
            f("secretName", A),
            f("items", Ty::List(&KEY_TO_PATH)),
            always("defaultMode", A),
            always("optional", A),
        ]),
    ),
    always("nfs", A),
    always("iscsi", A),
    always("glusterfs", A),
    always("persistentVolumeClaim", Ty::Obj(&[always("claimName", A), f("readOnly", A)])),
    always("rbd", A),
    always("flexVolume", A),
    always("cinder", A),
    always("cephfs", A),
    always("flocker", A),
    always("downwardAPI", A),
    always("fc", A),
    always("azureFile", A),
    f(
        "configMap",
        Ty::Obj(&[f("name", A), f("items", Ty::List(&KEY_TO_PATH)), always("defaultMode", A), always("optional", A)]),
    ),
    always("vsphereVolume", A),
    always("quobyte", A),
    always("azureDisk", A),
    always("photonPersistentDisk", A),
    always("projected", A),
    always("portworxVolume", A),
    always("scaleIO", A),
    always("storageos", A),
    always("csi", A),
    always("ephemeral", A),
    always("image", A),
]);
const VOLUME_MOUNT: Ty = Ty::Obj(&[
    always("name", A),
    f("readOnly", A),
    always("recursiveReadOnly", A),
    always("mountPath", A),
    f("subPath", A),
    always("mountPropagation", A),
    f("subPathExpr", A),
]);
const TOLERATION: Ty =
    Ty::Obj(&[f("key", A), f("operator", A), f("value", A), f("effect", A), always("tolerationSeconds", A)]);
const SELECTOR_REQUIREMENT: Ty = Ty::Obj(&[always("key", A), always("operator", A), f("values", A)]);
const SELECTOR_TERM: Ty = Ty::Obj(&[
    f("matchExpressions", Ty::List(&SELECTOR_REQUIREMENT)),
    f("matchFields", Ty::List(&SELECTOR_REQUIREMENT)),
]);
const AFFINITY: Ty = Ty::Obj(&[
    f(
        "nodeAffinity",
        Ty::Obj(&[
            always(
                "requiredDuringSchedulingIgnoredDuringExecution",
                Ty::Obj(&[always("nodeSelectorTerms", Ty::List(&SELECTOR_TERM))]),
            ),
            f(
                "preferredDuringSchedulingIgnoredDuringExecution",
                Ty::List(&Ty::Obj(&[always("weight", A), always("preference", SELECTOR_TERM)])),
            ),
        ]),
    ),
    always("podAffinity", A),
    always("podAntiAffinity", A),
]);
const PROFILE: Ty = Ty::Obj(&[always("type", A), always("localhostProfile", A)]);
const SE_LINUX: Ty = Ty::Obj(&[f("user", A), f("role", A), f("type", A), f("level", A)]);
const WINDOWS: Ty = Ty::Obj(&[
    always("gmsaCredentialSpecName", A),
    always("gmsaCredentialSpec", A),
    always("runAsUserName", A),
    always("hostProcess", A),
]);
const SECURITY_CONTEXT: Ty = Ty::Obj(&[
    always("capabilities", Ty::Obj(&[f("add", A), f("drop", A)])),
    always("privileged", A),
    always("seLinuxOptions", SE_LINUX),
    always("windowsOptions", WINDOWS),
    always("runAsUser", A),
    always("runAsGroup", A),
    always("runAsNonRoot", A),
    always("readOnlyRootFilesystem", A),
    always("allowPrivilegeEscalation", A),
    always("procMount", A),
    always("seccompProfile", PROFILE),
    always("appArmorProfile", PROFILE),
]);
const POD_SECURITY_CONTEXT: Ty = Ty::Obj(&[
    always("seLinuxOptions", SE_LINUX),
    always("windowsOptions", WINDOWS),
    always("runAsUser", A),
    always("runAsGroup", A),
    always("runAsNonRoot", A),
    f("supplementalGroups", A),
    always("supplementalGroupsPolicy", A),
    always("fsGroup", A),
    f("sysctls", Ty::List(&Ty::Obj(&[always("name", A), always("value", A)]))),
    always("fsGroupChangePolicy", A),
    always("seccompProfile", PROFILE),
    always("appArmorProfile", PROFILE),
    always("seLinuxChangePolicy", A),
]);
const CONTAINER_PATCH: Ty = Ty::Obj(&[
    f("name", A),
    f("env", ENV_VARS),
    f("volumeMounts", Ty::List(&VOLUME_MOUNT)),
    always("securityContext", SECURITY_CONTEXT),
]);
const POD_SPEC_PATCH: Ty = Ty::Obj(&[
    always("serviceAccountName", A),
    f("volumes", Ty::List(&VOLUME)),
    f("initContainers", Ty::List(&CONTAINER_PATCH)),
    f("containers", Ty::List(&CONTAINER_PATCH)),
    f("imagePullSecrets", Ty::List(&LOCAL_OBJECT_REFERENCE)),
    always("securityContext", POD_SECURITY_CONTEXT),
    f("nodeSelector", A),
    always("affinity", AFFINITY),
    f("tolerations", Ty::List(&TOLERATION)),
    f("schedulingGates", Ty::List(&LOCAL_OBJECT_REFERENCE)),
    always("terminationGracePeriodSeconds", A),
]);
const REPLICATED_JOB_PATCH: Ty = Ty::Obj(&[
    f("name", A),
    f(
        "template",
        Ty::Obj(&[
            always("metadata", OBJECT_META),
            f(
                "spec",
                Ty::Obj(&[always(
                    "template",
                    Ty::Obj(&[always("metadata", OBJECT_META), always("spec", POD_SPEC_PATCH)]),
                )]),
            ),
        ]),
    ),
]);
const RUNTIME_PATCH: Ty = Ty::Obj(&[
    f("manager", A),
    always("time", A),
    f(
        "trainingRuntimeSpec",
        Ty::Obj(&[f(
            "template",
            Ty::Obj(&[
                always("metadata", OBJECT_META),
                always("spec", Ty::Obj(&[f("replicatedJobs", Ty::List(&REPLICATED_JOB_PATCH))])),
            ]),
        )]),
    ),
]);
pub(crate) const RUNTIME_PATCHES: Ty = Ty::List(&RUNTIME_PATCH);

/// `v` as Go's `json.Marshal` writes the Go value of type `ty` it decodes to.
pub(crate) fn to_string(v: &Value, ty: Ty) -> String {
    let mut out = String::new();
    write(v, ty, &mut out);
    out
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

fn write(v: &Value, ty: Ty, out: &mut String) {
    match (v, ty) {
        (Value::Object(m), Ty::Obj(fields)) => {
            out.push('{');
            let mut first = true;
            let mut emit = |k: &str, x: &Value, t: Ty, out: &mut String| {
                if !first {
                    out.push(',');
                }
                first = false;
                write_string(out, k, true);
                out.push(':');
                write(x, t, out);
            };
            for field in fields {
                if let Some(x) = m.get(field.name)
                    && !(field.omit_zero && is_zero(x))
                {
                    emit(field.name, x, field.ty, out);
                }
            }
            for (k, x) in m {
                if !fields.iter().any(|f| f.name == k) && !is_zero(x) {
                    emit(k, x, Ty::Any, out);
                }
            }
            out.push('}');
        }
        (Value::Object(m), _) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k, true);
                out.push(':');
                write(x, Ty::Any, out);
            }
            out.push('}');
        }
        (Value::Array(items), t) => {
            let item = match t {
                Ty::List(i) => *i,
                _ => Ty::Any,
            };
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, item, out);
            }
            out.push(']');
        }
        (Value::String(s), _) => write_string(out, s, true),
        (Value::Null, _) => out.push_str("null"),
        (Value::Bool(b), _) => out.push_str(if *b { "true" } else { "false" }),
        (Value::Number(n), _) => out.push_str(&n.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn struct_order_omitempty_and_html_escapes_follow_go() {
        let env = json!([{"value": "a<b", "name": "X"}, {"name": "Y", "value": ""}]);
        assert_eq!(to_string(&env, ENV_VARS), r#"[{"name":"X","value":"a\u003cb"},{"name":"Y"}]"#);
        let r = json!({"kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org", "name": "torch"});
        assert_eq!(
            to_string(&r, RUNTIME_REF),
            r#"{"name":"torch","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}"#
        );
    }
}
