//! What a real API server does with a custom resource's body and its CRD's openAPIV3Schema:
//! apply defaults, drop (or, with `fieldValidation=Strict`, reject) fields the schema does not
//! declare, and reject values that break the schema with the field named.

use std::sync::Arc;

use serde_json::Value;

use super::cel;

/// `/spec/podSets/0/name` → `spec.podSets[0].name`.
fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part.replace("~1", "/").replace("~0", "~"));
        }
    }
    out
}

/// Writes each whole-valued float (`8.0`) as the integer it is, as the real server does: it
/// decodes a body's numbers into Go values, takes a whole float64 for an `integer` (kube-openapi's
/// `IsFloat64AJSONInteger`), and stores it as Go writes a float64, `8`. The Kubeflow SDK sends
/// `nvidia.com/gpu: 8.0`, which draft 4's `integer` alone would refuse.
pub fn whole_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                && f.fract() == 0.0
                && f.abs() < 9_007_199_254_740_992.0
            {
                // Below 2^53 a whole float64 converts to i64 exactly.
                *value = Value::from(f as i64);
            }
        }
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// Fills in `default`s of absent properties, recursively through present objects and arrays.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
            for (k, s) in props {
                if !map.contains_key(k)
                    && let Some(d) = s.get("default")
                {
                    map.insert(k.clone(), d.clone());
                }
                if let Some(v) = map.get_mut(k) {
                    apply_defaults(s, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(s, v));
            }
        }
        _ => {}
    }
}

/// Removes fields the schema does not declare; returns their paths. `metadata`, `apiVersion`
/// and `kind` at the top are the server's own business.
pub fn prune(schema: &Value, value: &mut Value) -> Vec<String> {
    let found = kube_conventions::schema::undeclared(schema, value);
    for field in &found {
        kube_conventions::schema::remove(value, &field.path);
    }
    found.iter().map(ToString::to_string).collect()
}

/// The CRD's `x-kubernetes-validations` rules, evaluated as the API server does: each rule
/// with `self` bound to the value at its place in the schema (each item of a list, each value
/// of a map), only where that value is present and not null; transition rules (those naming
/// `oldSelf`) only on update and only where the old object has the value too (properties by
/// name, map values by key, list items by their `x-kubernetes-list-map-keys`). Values equal to
/// the old ones are not checked again (ratcheting, as Kubernetes 1.33 does). Each failure is
/// (field, message) with the message as Kubernetes words it: `Invalid value: <message>`.
/// One request's rules share one [`cel::Budget`].
pub fn validation_rules(schema: &Arc<Value>, new: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let budget = cel::Budget::new();
    rules_in(schema, &ruled(schema), new, old, "", &budget, &mut out);
    out
}

/// The nodes of one schema that hold a rule, themselves or below (through `properties`,
/// `additionalProperties` and `items`, where [`rules_in`] descends), by address in that schema,
/// sorted. The walk of a value goes only where they are: most of an object (a JobSet's pod
/// template, a pod copy's spec) lies under nodes without rules, and walking it, a path string
/// made at every field, was most of what a write's rules cost (issue #39).
#[derive(Debug, Default)]
struct Ruled(Vec<usize>);

impl Ruled {
    fn of(schema: &Value) -> Ruled {
        // Post-order, so a node is marked once its children are known. A schema's depth is
        // bounded as every parsed body's is (serde_json's 128 levels).
        fn mark(s: &Value, out: &mut Vec<usize>) -> bool {
            let own = s.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
            let props = s.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values());
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            let below = props.chain(additional).chain(s.get("items")).fold(false, |any, sub| mark(sub, out) | any);
            if own || below {
                out.push(address(s));
            }
            own || below
        }
        let mut out = Vec::new();
        mark(schema, &mut out);
        out.sort_unstable();
        Ruled(out)
    }

    /// Whether `node`, a node of the schema this was made of, holds a rule or has one below.
    fn holds(&self, node: &Value) -> bool {
        self.0.binary_search(&address(node)).is_ok()
    }
}

/// Where a schema node lives: nodes of one shared schema keep their addresses while it lives.
fn address(node: &Value) -> usize {
    std::ptr::from_ref(node) as usize
}

/// The [`Ruled`] index of a schema, made once per shared schema (by its pointer: the addresses
/// are that schema's own) and kept as [`compiled`] keeps validators.
fn ruled(schema: &Arc<Value>) -> Arc<Ruled> {
    type Kept = std::sync::Mutex<Vec<(Arc<Value>, Arc<Ruled>)>>;
    static RULED: std::sync::OnceLock<Kept> = std::sync::OnceLock::new();
    let Ok(mut entries) = RULED.get_or_init(Default::default).lock() else {
        return Arc::new(Ruled::of(schema));
    };
    if let Some((_, r)) = entries.iter().find(|(s, _)| Arc::ptr_eq(s, schema)) {
        return r.clone();
    }
    let r = Arc::new(Ruled::of(schema));
    keep(&mut entries, (schema.clone(), r.clone()));
    r
}

/// Every rule of the schema that does not compile, as (where, why): a CRD carrying one is
/// refused, as the real server refuses it.
pub fn rule_compile_errors(schema: &Value, at: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![(schema, at.to_string())];
    while let Some((s, path)) = stack.pop() {
        let Some(obj) = s.as_object() else { continue };
        for (i, r) in obj.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
            let field = format!("{path}.x-kubernetes-validations[{i}].rule");
            if let Err(e) = cel::compile(rule) {
                out.push((field.clone(), format!("Invalid value: {rule:?}: {e}")));
            }
            if let Some(m) = r.get("messageExpression").and_then(Value::as_str)
                && let Err(e) = cel::compile(m)
            {
                out.push((
                    format!("{path}.x-kubernetes-validations[{i}].messageExpression"),
                    format!("Invalid value: {m:?}: {e}"),
                ));
            }
        }
        for (k, sub) in obj.get("properties").and_then(Value::as_object).into_iter().flatten() {
            stack.push((sub, format!("{path}.properties[{k}]")));
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = obj.get(key).filter(|v| v.is_object()) {
                stack.push((sub, format!("{path}.{key}")));
            }
        }
    }
    out.sort();
    out
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_string() } else { format!("{path}.{field}") }
}

fn rules_in(
    schema: &Value,
    ruled: &Ruled,
    new: &Value,
    old: Option<&Value>,
    path: &str,
    budget: &std::sync::Arc<cel::Budget>,
    out: &mut Vec<(String, String)>,
) {
    if new.is_null() || old == Some(new) || !ruled.holds(schema) {
        return;
    }
    let rules = schema.get("x-kubernetes-validations").and_then(Value::as_array);
    for rule in rules.into_iter().flatten() {
        if let Some(failure) = check_rule(schema, rule, new, old, budget) {
            let field = match rule.get("fieldPath").and_then(Value::as_str).map(|f| f.trim_start_matches('.')) {
                Some(f) if !f.is_empty() => join(path, f),
                _ => path.to_string(),
            };
            out.push((field, failure));
        }
    }
    match new {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                let Some(sub) = props.and_then(|p| p.get(k)).or(additional) else { continue };
                rules_in(sub, ruled, v, old.and_then(|o| o.get(k)), &join(path, k), budget, out);
            }
        }
        Value::Array(items) => {
            let Some(sub) = schema.get("items") else { return };
            let keys: Vec<&str> = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            let old_items = old.and_then(Value::as_array);
            for (i, v) in items.iter().enumerate() {
                let correlated = (!keys.is_empty())
                    .then(|| old_items?.iter().find(|o| keys.iter().all(|k| o.get(k) == v.get(k))))
                    .flatten();
                rules_in(sub, ruled, v, correlated, &format!("{path}[{i}]"), budget, out);
            }
        }
        _ => {}
    }
}

/// One rule on one value: `None` when it holds (or, being a transition rule, does not apply).
fn check_rule(
    schema: &Value,
    rule: &Value,
    new: &Value,
    old: Option<&Value>,
    budget: &std::sync::Arc<cel::Budget>,
) -> Option<String> {
    let source = rule.get("rule").and_then(Value::as_str).unwrap_or("");
    // kube-apiserver v1.37 prints a scalar's value and leaves an object's or a list's out
    // (earlier releases printed the type: `Invalid value: "object": ...`).
    let invalid = |detail: String| match new {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => format!("Invalid value: {}: {detail}", go_value(new)),
        _ => format!("Invalid value: {detail}"),
    };
    let program = match cel::compile(source) {
        Ok(p) => p,
        Err(e) => return Some(invalid(format!("rule {:?} does not compile: {e}", source.trim()))),
    };
    let transition = program.references("oldSelf");
    if transition && old.is_none() {
        return None;
    }
    let inputs = [("self", Some(new)), ("oldSelf", old.filter(|_| transition))];
    let inputs = cel::Inputs::new(inputs.into_iter().take(if transition { 2 } else { 1 }));
    let scope = inputs.as_ref().map_err(Clone::clone).and_then(|inputs| cel::Scope::new(inputs, budget));
    let verdict = scope.as_ref().map_err(Clone::clone).and_then(|s| s.evaluate_bool(&program));
    let detail = match verdict {
        Ok(true) => return None,
        Ok(false) => {
            let from_expression = rule
                .get("messageExpression")
                .and_then(Value::as_str)
                .and_then(|m| cel::compile(m).ok())
                .and_then(|m| scope.as_ref().ok()?.evaluate(&m).ok())
                .and_then(|v| cel::as_string(&v))
                .filter(|m| !m.trim().is_empty() && !m.contains('\n'));
            let message = rule.get("message").and_then(Value::as_str).map(str::to_string);
            from_expression.or(message).unwrap_or_else(|| format!("failed rule: {}", source.trim()))
        }
        Err(cel::CelError::Budget) => {
            "validation failed due to running out of cost budget, no further validation rules will be run".into()
        }
        Err(e) => format!("{e} evaluating rule: {}", source.trim()),
    };
    Some(match rule.get("reason").and_then(Value::as_str) {
        Some("FieldValueForbidden") => format!("Forbidden: {detail}"),
        Some("FieldValueRequired") => format!("Required value: {detail}"),
        Some("FieldValueDuplicate") => {
            format!("Duplicate value: {:?}", schema.get("type").and_then(Value::as_str).unwrap_or("object"))
        }
        _ => invalid(detail),
    })
}

/// Distinct schemas whose validators are kept: every CRD version a hub serves, with room; past
/// it the oldest goes (compiled again if met again), so CRDs created without end cannot grow it.
const COMPILED_SCHEMAS: usize = 512;

/// The [`compiled`] validators, by schema (its pointer, its fingerprint) in the order kept.
type Cache = std::sync::Mutex<Vec<(u64, Arc<Value>, Arc<jsonschema::Validator>)>>;
static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();

/// The schema's validator, compiled once per distinct schema: compiling a CRD's schema costs
/// far more than validating an object against it.
fn compiled(schema: &Arc<Value>) -> Option<Arc<jsonschema::Validator>> {
    let cache = CACHE.get_or_init(Default::default);
    // The same shared schema first: comparing whole schemas on every write showed in profiles.
    let mut entries = cache.lock().ok()?;
    if let Some((_, _, v)) = entries.iter().find(|(_, s, _)| Arc::ptr_eq(s, schema)) {
        return Some(v.clone());
    }
    // An equal schema read again (a CRD re-applied, or the same CRD on another server of the
    // process) shares the validator, under an entry of its own: were it to take the entry
    // over, two servers holding one CRD would take it from each other on every write, each
    // time hashing and comparing the whole schema again (3 % of a burst's samples, issue
    // #39). Fingerprints first: a new schema shares most of its bytes with some kept one
    // (another version of the CRD, a fuzzed copy), and comparing it whole against every entry
    // was a fifth of the hub fuzz target's time.
    let print = fingerprint(schema);
    let equal = entries.iter().find(|(p, s, _)| *p == print && s == schema).map(|(_, _, v)| v.clone());
    if let Some(v) = equal {
        keep(&mut entries, (print, schema.clone(), v.clone()));
        return Some(v);
    }
    // Draft 4: a CRD's OpenAPI v3 schema is JSON Schema's Wright-00 draft, which draft 4 is
    // closest to (a boolean `exclusiveMaximum`, no `$dynamicRef`). Compiled as the newest draft
    // (what `validator_for` picks for a schema naming none) the upstream CRDs took five times
    // the memory: 1.7 GB for JobSet, TrainJob, TrainingRuntime and Workload, 0.34 GB so.
    let v = Arc::new(jsonschema::draft4::new(schema).ok()?);
    keep(&mut entries, (print, schema.clone(), v.clone()));
    Some(v)
}

/// Adds a [`compiled`] entry; past [`COMPILED_SCHEMAS`] the oldest goes.
fn keep<T>(entries: &mut Vec<T>, entry: T) {
    if entries.len() >= COMPILED_SCHEMAS {
        entries.remove(0);
    }
    entries.push(entry);
}

/// A hash of a JSON value: equal values hash alike (numbers by value, objects in key order).
fn fingerprint(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    fn feed(v: &Value, h: &mut impl Hasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => (2u8, u).hash(h),
                (None, Some(i)) => (3u8, i).hash(h),
                (None, None) => (4u8, n.as_f64().map(f64::to_bits)).hash(h),
            },
            Value::String(s) => (5u8, s).hash(h),
            Value::Array(items) => {
                (6u8, items.len()).hash(h);
                items.iter().for_each(|x| feed(x, h));
            }
            Value::Object(fields) => {
                (7u8, fields.len()).hash(h);
                fields.iter().for_each(|(k, x)| {
                    k.hash(h);
                    feed(x, h);
                });
            }
        }
    }
    let mut h = std::hash::DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}

/// Compiles the schema's validator ahead of the first object that needs it.
pub fn warm(schema: &Arc<Value>) {
    let _ = compiled(schema);
}

/// One schema violation, as kube-apiserver reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub field: String,
    pub message: String,
    /// It keeps the CRD's validation rules from running (`hasBlockingErr`): a wrong type, a
    /// value outside its enum, a missing field, too long or too many. Other violations are
    /// reported together with the rules' failures.
    pub blocks_rules: bool,
    /// A fraction where an integer belongs, which fails the integer format as well.
    fraction: bool,
}

/// Schema violations, the field and the message as kube-apiserver words them
/// (apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors`, read against v1.37 on the
/// testbed: `tests/parity/apiserver.json`), ordered by field (the real server's order of two
/// varies from one request to the next).
pub fn validate(schema: &Arc<Value>, value: &Value) -> Vec<Violation> {
    let Some(validator) = compiled(schema) else {
        let message = "the CRD's schema does not compile".into();
        return vec![Violation { field: String::new(), message, blocks_rules: true, fraction: false }];
    };
    let mut violations: Vec<Violation> = validator.iter_errors(value).map(|e| kube_error(&e)).collect();
    violations.sort();
    violations.dedup();
    // The integer format's own complaint comes right after the type's.
    let mut out = Vec::with_capacity(violations.len());
    for v in violations {
        let format = v.fraction.then(|| Violation {
            field: "<nil>".into(),
            message: format!(
                "Invalid value: \"\": Checked value must be of type integer (default format) in {}",
                v.field
            ),
            blocks_rules: false,
            fraction: false,
        });
        out.push(v);
        out.extend(format);
    }
    out
}

/// A missing required field's message.
pub const REQUIRED: &str = "Required value";

/// What kube-apiserver adds when schema violations kept the rules from running.
pub const RULES_NOT_CHECKED: (&str, &str) = (
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
);

/// Whether the schema carries validation rules anywhere.
pub fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.contains_key("x-kubernetes-validations") || map.values().any(has_rules),
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// One violation in kube-apiserver's words.
fn kube_error(e: &jsonschema::ValidationError<'_>) -> Violation {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    let field = field_path(&e.instance_path.to_string());
    let value = go_value(&e.instance);
    let items = |n: u64| if n == 1 { "item" } else { "items" };
    // Go prints a whole float64 limit without its fraction (`10`, not `10.0`).
    let limit_of = |l: &Value| match l.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => l.to_string(),
    };
    let message = match &e.kind {
        K::Required { property } => {
            let name = property.as_str().map_or_else(|| property.to_string(), str::to_string);
            let field = join(&field, &name);
            return Violation { field, message: REQUIRED.into(), blocks_rules: true, fraction: false };
        }
        K::Enum { options } => {
            let supported: Vec<String> = options
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| match o {
                    Value::String(s) => format!("{s:?}"),
                    other => format!("{:?}", other.to_string()),
                })
                .collect();
            format!("Unsupported value: {value}: supported values: {}", supported.join(", "))
        }
        K::Type { kind: TypeKind::Single(expected) } => {
            let actual = type_name(&e.instance);
            format!("Invalid value: {actual:?}: {field} in body must be of type {expected}: {actual:?}")
        }
        K::Maximum { limit } => {
            format!("Invalid value: {value}: {field} in body should be less than or equal to {}", limit_of(limit))
        }
        K::ExclusiveMaximum { limit } => {
            format!("Invalid value: {value}: {field} in body should be less than {}", limit_of(limit))
        }
        K::Minimum { limit } => {
            format!("Invalid value: {value}: {field} in body should be greater than or equal to {}", limit_of(limit))
        }
        K::ExclusiveMinimum { limit } => {
            format!("Invalid value: {value}: {field} in body should be greater than {}", limit_of(limit))
        }
        K::MaxLength { limit } => format!("Too long: may not be more than {limit} bytes"),
        K::MinLength { limit } => {
            format!("Invalid value: {value}: {field} in body should be at least {limit} chars long")
        }
        K::Pattern { pattern } => format!("Invalid value: {value}: {field} in body should match '{pattern}'"),
        K::MaxItems { limit } => {
            let n = e.instance.as_array().map_or(0, Vec::len);
            format!("Too many: {n}: must have at most {limit} {}", items(*limit))
        }
        K::MinItems { limit } => {
            let n = e.instance.as_array().map_or(0, Vec::len);
            format!("Invalid value: {n}: {field} in body should have at least {limit} items")
        }
        K::MaxProperties { limit } => {
            let n = e.instance.as_object().map_or(0, serde_json::Map::len);
            format!("Too many: {n}: must have at most {limit} {}", items(*limit))
        }
        K::MinProperties { limit } => {
            let n = e.instance.as_object().map_or(0, serde_json::Map::len);
            format!("Invalid value: {n}: {field} in body should have at least {limit} properties")
        }
        _ => format!("Invalid value: {value}: {e}"),
    };
    let blocks_rules = matches!(
        e.kind,
        K::Enum { .. } | K::Type { .. } | K::MaxLength { .. } | K::MaxItems { .. } | K::MaxProperties { .. }
    );
    let fraction = matches!(e.kind, K::Type { kind: TypeKind::Single(jsonschema::JsonType::Integer) })
        && type_name(&e.instance) == "number";
    Violation { field, message, blocks_rules, fraction }
}

/// A JSON value's type as the OpenAPI validator names it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's field errors print it: strings quoted, numbers and booleans bare.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "default": "fast"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    /// Two servers of one process holding the same CRD each find the validator by their own
    /// schema's pointer, and share one: neither takes the entry from the other.
    #[test]
    fn equal_schemas_held_apart_share_one_validator_and_keep_their_entries() {
        let mut unique = schema();
        unique["properties"]["marker"] = json!({"type": "string", "description": "held apart"});
        let (a, b) = (Arc::new(unique.clone()), Arc::new(unique));
        let first = compiled(&a).expect("compiles");
        assert!(Arc::ptr_eq(&first, &compiled(&b).expect("compiles")), "one validator");
        let held = |s: &Arc<Value>| {
            let cache = CACHE.get().expect("cache").lock().expect("lock");
            cache.iter().any(|(_, kept, _)| Arc::ptr_eq(kept, s))
        };
        assert!(held(&a) && held(&b), "each schema keeps an entry of its own");
    }

    #[test]
    fn defaults_prune_and_validate_like_an_api_server() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
                           "spec": {"size": 0, "items": [{"name": "n", "extra": 1}], "free": {"any": 1}, "typo": true}});
        apply_defaults(&schema(), &mut v);
        assert_eq!(v["spec"]["mode"], "fast");
        assert_eq!(prune(&schema(), &mut v), vec!["spec.items[0].extra".to_string(), "spec.typo".to_string()]);
        assert_eq!(v["spec"]["free"]["any"], 1);
        let causes = validate(&Arc::new(schema()), &v);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.size");
    }

    #[test]
    fn a_whole_float_is_an_integer_as_the_real_server_reads_it() {
        let schema = Arc::new(
            json!({"type": "object", "properties": {"gpu": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                                                                    "size": {"type": "integer"}}}),
        );
        let mut v = json!({"gpu": 8.0, "size": 2.5, "list": [1.0, "x"]});
        whole_numbers(&mut v);
        assert_eq!(v, json!({"gpu": 8, "size": 2.5, "list": [1, "x"]}));
        assert_eq!(v["gpu"].to_string(), "8");
        let causes = validate(&schema, &v);
        // The type, then the integer format, as kube-apiserver reports a fraction.
        assert_eq!(causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(), ["size", "<nil>"]);
    }

    #[test]
    fn self_equals_old_self_makes_a_field_immutable() {
        let schema = Arc::new(json!({"properties": {"spec": {"properties": {
            "ref": {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "ref is immutable"}]},
            "free": {"type": "string"}}}}}));
        let old = json!({"spec": {"ref": {"name": "a"}, "free": "x"}});
        assert!(
            validation_rules(&schema, &json!({"spec": {"ref": {"name": "a"}, "free": "y"}}), Some(&old)).is_empty()
        );
        assert_eq!(
            validation_rules(&schema, &json!({"spec": {"ref": {"name": "b"}}}), Some(&old)),
            vec![("spec.ref".to_string(), "Invalid value: ref is immutable".to_string())]
        );
        // A transition rule does not apply on create.
        assert!(validation_rules(&schema, &json!({"spec": {"ref": {"name": "b"}}}), None).is_empty());
    }

    #[test]
    fn rules_apply_to_each_item_and_value_and_name_the_field() {
        let schema = Arc::new(json!({"properties": {"spec": {"type": "object", "properties": {
            "workers": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "x-kubernetes-validations": [
                    {"rule": "self.count >= 1", "messageExpression": "'count of ' + self.name + ' must be at least 1'"},
                    {"rule": "self.count <= oldSelf.count", "message": "count may only shrink", "reason": "FieldValueForbidden"}]}},
            "labels": {"type": "object", "additionalProperties": {"type": "string",
                "x-kubernetes-validations": [{"rule": "size(self) <= 3"}]}},
            "mode": {"type": "string", "x-kubernetes-validations": [{"rule": "self in ['a', 'b']", "message": "mode must be a or b"}]}},
            "x-kubernetes-validations": [{"rule": "!has(self.mode) || self.mode != 'b' || has(self.labels)",
                "message": "mode b needs labels", "fieldPath": ".mode"}]}}}));
        let obj = json!({"spec": {"workers": [{"name": "w", "count": 0}, {"name": "v", "count": 5}],
                                   "labels": {"k": "long"}, "mode": "c"}});
        let mut got = validation_rules(&schema, &obj, None);
        got.sort();
        assert_eq!(
            got,
            vec![
                ("spec.labels.k".to_string(), "Invalid value: \"long\": failed rule: size(self) <= 3".to_string()),
                ("spec.mode".to_string(), "Invalid value: \"c\": mode must be a or b".to_string()),
                ("spec.workers[0]".to_string(), "Invalid value: count of w must be at least 1".to_string()),
            ]
        );
        // Items correlate with the old list by key, whatever their order; b needs labels.
        let old = json!({"spec": {"workers": [{"name": "v", "count": 4}, {"name": "w", "count": 1}], "mode": "a"}});
        let new = json!({"spec": {"workers": [{"name": "w", "count": 1}, {"name": "v", "count": 5}], "mode": "b"}});
        let mut got = validation_rules(&schema, &new, Some(&old));
        got.sort();
        assert_eq!(
            got,
            vec![
                ("spec.mode".to_string(), "Invalid value: mode b needs labels".to_string()),
                ("spec.workers[1]".to_string(), "Forbidden: count may only shrink".to_string()),
            ]
        );
    }

    /// The walk goes only under nodes with a rule at or below them; a subtree without one (a
    /// pod template) is not walked, and one with a rule deep inside it is.
    #[test]
    fn rules_are_looked_for_only_where_the_schema_has_some() {
        let schema = json!({"properties": {"spec": {"properties": {
            "template": {"type": "object", "properties": {"containers": {"type": "array", "items": {"type": "object"}}}},
            "jobs": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self != 'x'"}]}}},
            "empty": {"type": "string", "x-kubernetes-validations": []}}}}});
        let ruled = Ruled::of(&schema);
        let spec = &schema["properties"]["spec"];
        let jobs = &spec["properties"]["jobs"];
        for held in [&schema, spec, jobs, &jobs["items"], &jobs["items"]["additionalProperties"]] {
            assert!(ruled.holds(held), "{held}");
        }
        let template = &spec["properties"]["template"];
        for bare in [template, &template["properties"]["containers"], &spec["properties"]["empty"]] {
            assert!(!ruled.holds(bare), "{bare}");
        }
        // Schemas of other shapes (a tuple's `items`, a boolean `additionalProperties`, a
        // non-object where a schema belongs) hold nothing and break nothing.
        let odd = json!({"properties": {"t": {"items": [{"x-kubernetes-validations": [{"rule": "true"}]}]},
                                        "m": {"additionalProperties": true}, "s": "string"}});
        assert_eq!(Ruled::of(&odd).0, Vec::<usize>::new());
        let schema = Arc::new(schema);
        let obj = json!({"spec": {"template": {"containers": [{"x": "x"}]}, "jobs": [{"a": "y", "b": "x"}]}});
        assert_eq!(
            validation_rules(&schema, &obj, None),
            vec![("spec.jobs[0].b".to_string(), "Invalid value: \"x\": failed rule: self != 'x'".to_string())]
        );
    }

    #[test]
    fn a_rule_that_does_not_compile_is_named() {
        let schema = Arc::new(json!({"properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a =="}]}}}));
        let errs = rule_compile_errors(&schema, "openAPIV3Schema");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].0, "openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule");
        assert!(errs[0].1.contains("compilation failed"), "{errs:?}");
        let got = validation_rules(&schema, &json!({"spec": {"a": 1}}), None);
        assert!(got[0].1.contains("does not compile"), "{got:?}");
    }

    #[test]
    fn equal_schemas_share_a_fingerprint_and_a_changed_byte_changes_it() {
        let a = json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}, "required": ["n"]});
        let same = json!({"required": ["n"], "properties": {"n": {"maximum": 5, "type": "integer"}}, "type": "object"});
        assert_eq!(fingerprint(&a), fingerprint(&same));
        for other in [
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 6}}, "required": ["n"]}),
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5.5}}, "required": ["n"]}),
            json!({"type": "object", "properties": {"m": {"type": "integer", "maximum": 5}}, "required": ["n"]}),
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}, "required": ["n", "n"]}),
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}, "required": "n"}),
        ] {
            assert_ne!(fingerprint(&a), fingerprint(&other), "{other}");
        }
    }
}
