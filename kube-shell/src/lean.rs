//! Objects decoded without their `metadata.managedFields`, which no controller of ours reads,
//! decoded to their metadata alone where nothing else is read ([`Meta`]), and answers not
//! decoded at all where nobody reads them.
//!
//! k8s-openapi decodes each managed-fields entry's field set into a `serde_json::Value` tree,
//! often the larger half of an object, and every watcher of every kind did that work for each
//! event only to drop the entries afterwards, as every write did for the object it answered
//! with: 5 % of a burst's CPU. [`Lean`] decodes the object through a deserializer that skips the
//! entries unparsed, the way `serde::de::IgnoredAny` skips a field nobody asked for. It wraps
//! whatever deserializer it is given, so it does not depend on the JSON's key order or on
//! borrowing from the input (a watch event whose `object` comes before its `type` is buffered
//! by serde first). [`Unread`] is a write's answer that is checked to be JSON and dropped.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicResourceScope;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor};

/// `K` as decoded without `metadata.managedFields` (left `None`); otherwise `K` itself, and
/// written as `K` is.
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

/// An answer to a write that nobody reads: the same request, its answer not decoded.
pub struct Unread<K> {
    // `Resource` hands out metadata: there is none to hand.
    meta: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

/// `K`'s metadata alone (without managedFields), the rest of the object skipped unparsed: for a
/// watch that reads nothing else, such as the burst benchmark's, which notes when each JobSet
/// and Placement appears and decoded whole JobSets, pod templates and all, to read a label.
pub struct Meta<K> {
    meta: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

/// The type information of `K`, for a wrapper of it.
macro_rules! resource_of {
    ($wrapper:ident, $meta:ident, $meta_mut:ident) => {
        impl<K: kube::Resource> kube::Resource for $wrapper<K> {
            type DynamicType = K::DynamicType;
            // Dynamic, so an `Api` of either scope can be made for it ([`api`]).
            type Scope = DynamicResourceScope;

            fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::kind(dt)
            }
            fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::group(dt)
            }
            fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::version(dt)
            }
            fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
                K::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                $meta(self)
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                $meta_mut(self)
            }
        }
    };
}

fn lean_meta<K: kube::Resource>(o: &Lean<K>) -> &ObjectMeta {
    o.0.meta()
}
fn lean_meta_mut<K: kube::Resource>(o: &mut Lean<K>) -> &mut ObjectMeta {
    o.0.meta_mut()
}
fn unread_meta<K>(o: &Unread<K>) -> &ObjectMeta {
    &o.meta
}
fn unread_meta_mut<K>(o: &mut Unread<K>) -> &mut ObjectMeta {
    &mut o.meta
}
fn meta_meta<K>(o: &Meta<K>) -> &ObjectMeta {
    &o.meta
}
fn meta_meta_mut<K>(o: &mut Meta<K>) -> &mut ObjectMeta {
    &mut o.meta
}
resource_of!(Lean, lean_meta, lean_meta_mut);
resource_of!(Meta, meta_meta, meta_meta_mut);
resource_of!(Unread, unread_meta, unread_meta_mut);

impl<K> Clone for Unread<K> {
    fn clone(&self) -> Self {
        Unread { meta: self.meta.clone(), kind: PhantomData }
    }
}

impl<K> Clone for Meta<K> {
    fn clone(&self) -> Self {
        Meta { meta: self.meta.clone(), kind: PhantomData }
    }
}

impl<K> fmt::Debug for Meta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Meta").field(&self.meta).finish()
    }
}

impl<'de, K> de::Deserialize<'de> for Meta<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Every other field is skipped as serde skips a field nobody declared (IgnoredAny).
        #[derive(serde::Deserialize)]
        struct Only {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        Lean::<Only>::deserialize(d).map(|Lean(o)| Meta { meta: o.metadata, kind: PhantomData })
    }
}

impl<K> fmt::Debug for Unread<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Unread")
    }
}

impl<'de, K> de::Deserialize<'de> for Unread<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Unread { meta: ObjectMeta::default(), kind: PhantomData })
    }
}

impl<K: serde::Serialize> serde::Serialize for Lean<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// The same requests as `api`, answered as [`Lean`] objects.
pub fn api<K>(api: kube::Api<K>) -> kube::Api<Lean<K>>
where
    K: kube::Resource,
    K::DynamicType: Default,
{
    api_with(api, &K::DynamicType::default())
}

/// [`api`] for a kind known at run time (a `DynamicObject`'s).
pub fn api_with<K: kube::Resource>(api: kube::Api<K>, dt: &K::DynamicType) -> kube::Api<Lean<K>> {
    same_requests(api, dt)
}

/// The same requests as `api`, answered with the objects' metadata alone ([`Meta`]).
pub fn meta<K>(api: kube::Api<K>) -> kube::Api<Meta<K>>
where
    K: kube::Resource,
    K::DynamicType: Default,
{
    same_requests(api, &K::DynamicType::default())
}

/// The same requests as `api`, their answers not decoded ([`Unread`]).
pub fn unread<K>(api: kube::Api<K>) -> kube::Api<Unread<K>>
where
    K: kube::Resource,
    K::DynamicType: Default,
{
    unread_with(api, &K::DynamicType::default())
}

/// [`unread`] for a kind known at run time (a `DynamicObject`'s).
pub fn unread_with<K: kube::Resource>(api: kube::Api<K>, dt: &K::DynamicType) -> kube::Api<Unread<K>> {
    same_requests(api, dt)
}

fn same_requests<K, W>(api: kube::Api<K>, dt: &K::DynamicType) -> kube::Api<W>
where
    K: kube::Resource,
    W: kube::Resource<DynamicType = K::DynamicType, Scope = DynamicResourceScope>,
{
    let namespace = api.namespace().map(str::to_owned);
    let client = api.into_client();
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client, &ns, dt),
        None => kube::Api::all_with(client, dt),
    }
}

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Wrapped { inner: d, level: Level::Object }).map(Lean)
    }
}

/// Which map a wrapper stands in for: the object (whose `metadata` it looks into) or the
/// metadata (whose `managedFields` it skips).
#[derive(Clone, Copy)]
enum Level {
    Object,
    Metadata,
}

/// A deserializer, or a visitor, whose maps are read through [`Map`]; everything else passes
/// through unchanged.
struct Wrapped<T> {
    inner: T,
    level: Level,
}

macro_rules! pass_through {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.inner.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Wrapped<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(Wrapped { inner: visitor, level: self.level })
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(Wrapped { inner: visitor, level: self.level })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(name, fields, Wrapped { inner: visitor, level: self.level })
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        // `metadata` is an `Option<ObjectMeta>` in some types: its `Some` is the map.
        self.inner.deserialize_option(Wrapped { inner: visitor, level: self.level })
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_newtype_struct(name, visitor)
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }
    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
    pass_through! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string
        deserialize_bytes deserialize_byte_buf deserialize_unit deserialize_seq
        deserialize_identifier deserialize_ignored_any
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrapped<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Map { inner: map, level: self.level, metadata_next: false })
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Wrapped { inner: d, level: self.level })
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.inner.visit_str(v)
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(v)
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.inner.visit_string(v)
    }
}

/// A map read key by key: at the object's level it marks the `metadata` entry so its value is
/// read through [`Wrapped`] again; at the metadata's level it skips `managedFields` unparsed.
struct Map<A> {
    inner: A,
    level: Level,
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        loop {
            // The key read here, then handed to the caller's seed as the string it was.
            let Some(key) = self.inner.next_key::<Key<'de>>()? else { return Ok(None) };
            match (self.level, key.as_str()) {
                (Level::Metadata, "managedFields") => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                (Level::Object, "metadata") => self.metadata_next = true,
                _ => self.metadata_next = false,
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(Seed { inner: seed, level: Level::Metadata })
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A seed whose value is read through [`Wrapped`] at `level`.
struct Seed<S> {
    inner: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Wrapped { inner: d, level: self.level })
    }
}

/// A map's key, borrowed from the input where the deserializer allows it.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de, E: de::Error> IntoDeserializer<'de, E> for Key<'de> {
    type Deserializer = KeyDeserializer<'de, E>;

    fn into_deserializer(self) -> Self::Deserializer {
        match self {
            Key::Borrowed(s) => KeyDeserializer::Borrowed(de::value::BorrowedStrDeserializer::new(s)),
            Key::Owned(s) => KeyDeserializer::Owned(s.into_deserializer()),
        }
    }
}

/// A key as the caller's seed reads it: a string, borrowed or owned.
enum KeyDeserializer<'de, E> {
    Borrowed(de::value::BorrowedStrDeserializer<'de, E>),
    Owned(de::value::StringDeserializer<E>),
}

impl<'de, E: de::Error> Deserializer<'de> for KeyDeserializer<'de, E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self {
            KeyDeserializer::Borrowed(d) => d.deserialize_any(visitor),
            KeyDeserializer::Owned(d) => d.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Apply", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}}}}}}],
                "resourceVersion": "7"
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        })
    }

    /// The full decode, then its managedFields dropped: what [`Lean`] must equal.
    fn stripped(v: &serde_json::Value) -> Pod {
        let mut p: Pod = serde_json::from_value(v.clone()).unwrap_or_else(|e| unreachable!("{e}"));
        p.metadata.managed_fields = None;
        p
    }

    #[test]
    fn decodes_the_object_without_its_managed_fields() {
        let v = pod();
        let full: Pod = serde_json::from_value(v.clone()).unwrap_or_default();
        assert!(full.metadata.managed_fields.is_some(), "the fixture has entries to skip");
        let bytes = serde_json::to_vec(&v).unwrap_or_default();
        let lean: Lean<Pod> = serde_json::from_slice(&bytes).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(lean.0, stripped(&v));
        assert_eq!(lean.0.metadata.resource_version.as_deref(), Some("7"), "keys after the entries are kept");
    }

    #[test]
    fn decodes_alike_from_a_deserializer_that_owns_its_strings_and_in_any_key_order() {
        // from_value hands out owned strings, as serde's buffering for an adjacently tagged
        // watch event whose `object` precedes its `type` does; escaped keys are owned too.
        let v = pod();
        let lean: Lean<Pod> = serde_json::from_value(v.clone()).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(lean.0, stripped(&v));
        let reordered = r#"{"status":{"phase":"Running"},"metadata":{"managedFields":[{"manager":"m"}],
            "na\u006de":"p","labels":{"a":"b"}},"spec":{"containers":[]},"kind":"Pod","apiVersion":"v1"}"#;
        let lean: Lean<Pod> = serde_json::from_str(reordered).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(lean.0.metadata.name.as_deref(), Some("p"));
        assert_eq!(lean.0.metadata.managed_fields, None);
        let watched: kube::core::WatchEvent<Lean<Pod>> =
            serde_json::from_value(json!({"object": v, "type": "MODIFIED"})).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(matches!(watched, kube::core::WatchEvent::Modified(p) if p.0.metadata.managed_fields.is_none()));
    }

    #[test]
    fn a_lean_object_is_written_as_the_object_and_an_unread_answer_is_still_checked_as_json() {
        let p = stripped(&pod());
        assert_eq!(serde_json::to_value(Lean(p.clone())).ok(), serde_json::to_value(&p).ok());
        assert!(serde_json::from_value::<Unread<Pod>>(pod()).is_ok());
        assert!(serde_json::from_str::<Unread<Pod>>(r#"{"metadata": {"#).is_err());
    }

    #[test]
    fn metadata_alone_is_the_full_decodes_metadata_without_its_managed_fields() {
        let v = pod();
        let meta: Meta<Pod> =
            serde_json::from_slice(&serde_json::to_vec(&v).unwrap_or_default()).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(kube::Resource::meta(&meta), &stripped(&v).metadata);
        // In any key order, from a deserializer that owns its strings, as a watch event.
        let watched: kube::core::WatchEvent<Meta<Pod>> =
            serde_json::from_value(json!({"object": v, "type": "ADDED"})).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(
            matches!(watched, kube::core::WatchEvent::Added(m) if m.meta.labels == stripped(&pod()).metadata.labels)
        );
        // The rest is skipped, not read: a spec no Pod could have still decodes.
        let odd = json!({"metadata": {"name": "p"}, "spec": {"containers": "not a list"}});
        assert!(serde_json::from_value::<Meta<Pod>>(odd).is_ok());
        assert!(
            serde_json::from_str::<Meta<Pod>>(r#"{"metadata": {"name": 7}}"#).is_err(),
            "metadata is still checked"
        );
    }

    #[test]
    fn a_dynamic_object_keeps_its_data_and_loses_only_its_managed_fields() {
        let o: Lean<kube::api::DynamicObject> = serde_json::from_value(pod()).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(o.0.metadata.managed_fields, None);
        assert_eq!(o.0.metadata.name.as_deref(), Some("p"));
        assert_eq!(o.0.data["spec"]["containers"][0]["image"], "i");
    }

    /// The requests of an `Api` and of its lean and unread twins, and what each decoded.
    #[tokio::test]
    async fn the_twins_ask_what_the_api_asks_and_decode_its_answer_lean_or_not_at_all() {
        type Asked = std::sync::Arc<std::sync::Mutex<Vec<String>>>;
        let asked = Asked::default();
        let seen = asked.clone();
        let service = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            seen.lock().map(|mut s| s.push(format!("{} {}", req.method(), req.uri().path()))).ok();
            async move {
                hyper::Response::builder()
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(pod().to_string())))
            }
        });
        let client = kube::Client::new(service, "default");
        let patch = kube::api::Patch::Merge(json!({}));
        let pp = kube::api::PatchParams::default();
        let namespaced = kube::Api::<Pod>::namespaced(client.clone(), "ns");
        let full = namespaced.get("p").await.ok().and_then(|p| p.metadata.managed_fields);
        assert!(full.is_some(), "the plain Api decodes the entries");
        let Ok(Lean(lean)) = api(namespaced.clone()).get("p").await else { unreachable!("the fake answers") };
        assert_eq!(lean, stripped(&pod()));
        assert!(unread(namespaced).patch_status("p", &pp, &patch).await.is_ok());
        assert!(unread(kube::Api::<Pod>::all(client)).list(&Default::default()).await.is_err(), "a pod is no list");
        let asked = asked.lock().map(|a| a.clone()).unwrap_or_default();
        assert_eq!(
            asked,
            [
                "GET /api/v1/namespaces/ns/pods/p",
                "GET /api/v1/namespaces/ns/pods/p",
                "PATCH /api/v1/namespaces/ns/pods/p/status",
                "GET /api/v1/pods"
            ]
        );
    }

    #[test]
    fn managed_fields_elsewhere_are_kept_and_errors_name_the_field() {
        // Only the object's own metadata loses them: a pod template's metadata is data.
        let lean: Lean<k8s_openapi::api::core::v1::PodTemplate> =
            serde_json::from_value(json!({"metadata": {"name": "t"}, "template": {"metadata": {"managedFields": []}}}))
                .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(lean.0.template.and_then(|t| t.metadata).and_then(|m| m.managed_fields), Some(vec![]));
        let bad = json!({"metadata": {"name": 3, "managedFields": []}});
        let error = serde_json::from_value::<Lean<Pod>>(bad).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("invalid type: integer `3`, expected a string"), "{error}");
    }
}
