//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as
//! client-go and kubectl's typed commands (`kubectl create namespace|configmap|secret|…`) send
//! built-in kinds: the `k8s\0` magic, a `runtime.Unknown` envelope naming the kind, and the
//! object's own message. Decoded with prost-reflect against upstream's `generated.proto` files
//! (proto/, compiled by build.rs) into the object's JSON form, which the store keeps.

use std::sync::OnceLock;

use base64ct::Encoding;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, ReflectMessage, Value};
use serde_json::{Map, Value as Json};

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));
const MAGIC: &[u8] = b"k8s\0";
const META: &str = "apimachinery.pkg.apis.meta.v1.";

/// Fields that Go embeds (`json:",inline"`): their fields belong to the enclosing object.
const INLINE: [&str; 11] = [
    "api.core.v1.ConfigMapEnvSource.localObjectReference",
    "api.core.v1.ConfigMapKeySelector.localObjectReference",
    "api.core.v1.ConfigMapProjection.localObjectReference",
    "api.core.v1.ConfigMapVolumeSource.localObjectReference",
    "api.core.v1.EphemeralContainer.ephemeralContainerCommon",
    "api.core.v1.PersistentVolumeSpec.persistentVolumeSource",
    "api.core.v1.Probe.handler",
    "api.core.v1.SecretEnvSource.localObjectReference",
    "api.core.v1.SecretKeySelector.localObjectReference",
    "api.core.v1.SecretProjection.localObjectReference",
    "api.core.v1.Volume.volumeSource",
];

#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf magic (k8s\\0)")]
    NoMagic,
    #[error("the runtime.Unknown envelope does not decode")]
    Envelope(#[source] prost::DecodeError),
    #[error("the envelope's content encoding {0:?} is not supported")]
    Encoding(String),
    #[error("{kind} ({api_version}) has no protobuf encoding here")]
    UnknownKind { api_version: String, kind: String },
    #[error("the {kind} message does not decode")]
    Object {
        kind: String,
        #[source]
        source: prost::DecodeError,
    },
}

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    // The descriptor set is compiled from proto/ by build.rs: it always decodes.
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).unwrap_or_else(|_| DescriptorPool::new()))
}

/// The proto package of an API version's kinds, as upstream's files name them.
fn package(api_version: &str) -> String {
    match api_version.split_once('/') {
        None => format!("api.core.{api_version}"),
        Some((group, version)) => format!("api.{}.{version}", group.split('.').next().unwrap_or(group)),
    }
}

/// The object a protobuf request body holds, in its JSON form.
pub fn decode(body: &[u8]) -> Result<Json, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let pool = pool();
    let unknown = pool
        .get_message_by_name("apimachinery.pkg.runtime.Unknown")
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: "runtime".into(), kind: "Unknown".into() })?;
    let envelope = DynamicMessage::decode(unknown, rest).map_err(ProtobufError::Envelope)?;
    let text = |m: &DynamicMessage, f: &str| {
        m.get_field_by_name(f).and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    };
    let type_meta = envelope.get_field_by_name("typeMeta").and_then(|v| v.as_message().cloned());
    let (api_version, kind) = type_meta.map(|t| (text(&t, "apiVersion"), text(&t, "kind"))).unwrap_or_default();
    let encoding = text(&envelope, "contentEncoding");
    if !encoding.is_empty() {
        return Err(ProtobufError::Encoding(encoding));
    }
    let raw = envelope.get_field_by_name("raw").and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
    let descriptor = pool
        .get_message_by_name(&format!("{}.{kind}", package(&api_version)))
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: api_version.clone(), kind: kind.clone() })?;
    let message = DynamicMessage::decode(descriptor, raw.as_ref())
        .map_err(|source| ProtobufError::Object { kind: kind.clone(), source })?;
    let mut object = Map::new();
    object.insert("kind".into(), kind.into());
    object.insert("apiVersion".into(), api_version.into());
    if let Json::Object(fields) = message_json(&message) {
        object.extend(fields);
    }
    Ok(Json::Object(object))
}

/// A message as Kubernetes writes it in JSON. Go puts every non-pointer field on the wire, so an
/// empty string is dropped (as `omitempty` would; to a Go reader the two are the same), while
/// numbers and booleans are kept (a pointer's `0` or `false` means something).
fn message_json(m: &DynamicMessage) -> Json {
    let descriptor = m.descriptor();
    let name = descriptor.full_name();
    let field = |f: &str| m.get_field_by_name(f).map(|v| v.into_owned());
    let meta = name.strip_prefix(META);
    match (meta, name) {
        (Some("Time" | "MicroTime"), _) => {
            let seconds = field("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
            let nanos = field("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
            if seconds == 0 && nanos == 0 {
                return Json::Null;
            }
            rfc3339(seconds, nanos, meta == Some("MicroTime")).into()
        }
        (Some("Duration"), _) => go_duration(field("duration").and_then(|v| v.as_i64()).unwrap_or(0)).into(),
        (Some("FieldsV1"), _) | (_, "apimachinery.pkg.runtime.RawExtension") => {
            let raw = field("Raw").or_else(|| field("raw")).and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
            serde_json::from_slice(&raw).unwrap_or(Json::Null)
        }
        (_, "apimachinery.pkg.api.resource.Quantity") => {
            field("string").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default().into()
        }
        (_, "apimachinery.pkg.util.intstr.IntOrString") => {
            if field("type").and_then(|v| v.as_i64()) == Some(1) {
                field("strVal").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default().into()
            } else {
                field("intVal").and_then(|v| v.as_i32()).unwrap_or(0).into()
            }
        }
        _ => {
            let mut object = Map::new();
            for (f, v) in m.fields() {
                if matches!(v, Value::String(s) if s.is_empty()) {
                    continue;
                }
                let j = value_json(v);
                if j.is_null() {
                    continue;
                }
                let path = format!("{name}.{}", f.name());
                match j {
                    Json::Object(inner) if INLINE.contains(&path.as_str()) => object.extend(inner),
                    j => {
                        object.insert(f.name().to_string(), j);
                    }
                }
            }
            Json::Object(object)
        }
    }
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::Bool(b) => (*b).into(),
        Value::I32(i) => (*i).into(),
        Value::I64(i) => (*i).into(),
        Value::U32(i) => (*i).into(),
        Value::U64(i) => (*i).into(),
        Value::F32(f) => f64::from(*f).into(),
        Value::F64(f) => (*f).into(),
        Value::String(s) => s.clone().into(),
        Value::Bytes(b) => base64ct::Base64::encode_string(b).into(),
        Value::EnumNumber(n) => (*n).into(),
        Value::Message(m) => message_json(m),
        Value::List(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Map(entries) => {
            // Sorted: a map's order on the wire is the sender's.
            let mut pairs: Vec<(String, Json)> = entries.iter().map(|(k, v)| (key_text(k), value_json(v))).collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Json::Object(pairs.into_iter().collect())
        }
    }
}

fn key_text(k: &MapKey) -> String {
    match k {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(i) => i.to_string(),
        MapKey::U64(i) => i.to_string(),
    }
}

/// `metav1.Time` (seconds) or `MicroTime` (microseconds) as Kubernetes writes them.
fn rfc3339(seconds: i64, nanos: i32, micro: bool) -> String {
    let text = super::time::rfc3339(seconds);
    if micro { format!("{}.{:06}Z", text.trim_end_matches('Z'), nanos / 1000) } else { text }
}

/// Go's `time.Duration` text for the whole seconds, minutes and hours Kubernetes uses.
fn go_duration(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        return match n {
            0 => "0s".into(),
            n if n < 1_000 => format!("{sign}{n}ns"),
            n if n < 1_000_000 => format!("{sign}{}µs", n as f64 / 1e3),
            n => format!("{sign}{}ms", n as f64 / 1e6),
        };
    }
    let (h, m) = (n / 3_600_000_000_000, n % 3_600_000_000_000 / 60_000_000_000);
    let s = (n % 60_000_000_000) as f64 / 1e9;
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
    }

    /// Bodies captured from kubectl v1.32 (`create namespace demo`, `create configmap c
    /// --from-literal=a=b`).
    #[test]
    fn kubectls_bodies_decode_to_the_objects_json() {
        let ns = hex(
            "6b3873000a0f0a02763112094e616d657370616365121c0a140a0464656d6f12001a0022002a0032003800420012001a020a001a002200",
        );
        let v = decode(&ns).expect("namespace");
        assert_eq!(v["kind"], "Namespace");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"]["name"], "demo");
        assert!(v["metadata"].get("generateName").is_none(), "{v}");
        let cm = hex(
            "6b3873000a0f0a0276311209436f6e6669674d6170121b0a110a016312001a0022002a0032003800420012060a01611201621a002200",
        );
        let v = decode(&cm).expect("configmap");
        assert_eq!(
            (v["kind"].clone(), v["metadata"]["name"].clone(), v["data"].clone()),
            (json!("ConfigMap"), json!("c"), json!({"a": "b"}))
        );
    }

    #[test]
    fn what_is_not_protobuf_or_not_known_is_refused_with_why() {
        assert!(matches!(decode(b"{\"kind\":\"Namespace\"}"), Err(ProtobufError::NoMagic)));
        assert!(matches!(decode(b"k8s\0\xff\xff\xff"), Err(ProtobufError::Envelope(_))));
        // A Namespace envelope naming a kind this server has no message for.
        let mut body = hex("6b3873000a0f0a02763112094e616d657370616365");
        body[12..21].copy_from_slice(b"Nonexists");
        assert!(matches!(decode(&body), Err(ProtobufError::UnknownKind { .. })), "{:?}", decode(&body));
        assert_eq!(rfc3339(86_401, 0, false), "1970-01-02T00:00:01Z");
        assert_eq!(go_duration(90 * 1_000_000_000), "1m30s");
    }
}
