//! ValidatingAdmissionPolicies, as kube-apiserver applies them: every
//! ValidatingAdmissionPolicyBinding whose policy matches a write (its `matchConstraints`, then
//! the binding's `matchResources`, then the policy's `matchConditions`) has the policy's
//! `validations` evaluated in CEL ([`super::cel`]) with `object`, `oldObject`, `request`
//! (operation, subResource, name, namespace, userInfo …), `namespaceObject` and `variables`
//! bound, each variable evaluated when an expression first reads it, as kube-apiserver's are.
//! The first validation that fails, under a binding whose `validationActions` include `Deny`,
//! refuses the write with the API server's words: `<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`,
//! and the validation's `reason` (Forbidden: 403; unset or Invalid: 422). An expression that
//! does not compile, fails or runs out of budget denies under `failurePolicy: Fail` (the
//! default) and is skipped under `Ignore`.
//!
//! Not done: `paramKind`/`paramRef` (a policy with params is a configuration error), the
//! `authorizer` variable, `Warn` and `Audit` actions (nothing is denied for them), audit
//! annotations. As on a real server, the admissionregistration.k8s.io kinds themselves are
//! exempt, so a policy cannot lock its own removal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value, json};

use super::auth::UserInfo;
use super::cel::{self, Budget, CelError};
use super::resources::ResourceType;
use super::status::ApiError;
use super::view::View;

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const POLICIES: &str = "validatingadmissionpolicies";
pub const BINDINGS: &str = "validatingadmissionpolicybindings";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One write, as admission sees it.
#[derive(Debug)]
pub struct Attributes<'a> {
    pub user: &'a UserInfo,
    pub operation: Operation,
    pub rt: &'a ResourceType,
    /// `status` for a write of the status subresource.
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The object after the write; none on delete.
    pub object: Option<&'a Value>,
    /// The object before; none on create.
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

impl Attributes<'_> {
    /// `request`, as `admission.k8s.io/v1` AdmissionRequest names its fields.
    fn request(&self) -> Value {
        // Each part built where it goes: `json!` writes a `Value` it is given over again.
        let rt = self.rt;
        let gvk = || json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let gvr = || json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
        let mut request = Map::new();
        request.insert("uid".into(), "".into());
        request.insert("kind".into(), gvk());
        request.insert("resource".into(), gvr());
        request.insert("requestKind".into(), gvk());
        request.insert("requestResource".into(), gvr());
        request.insert("operation".into(), self.operation.as_str().into());
        let user = json!({"username": self.user.username, "uid": "", "groups": self.user.groups});
        request.insert("userInfo".into(), user);
        request.insert("dryRun".into(), self.dry_run.into());
        // As a real API server: an empty subResource, name or namespace is no key at all, and
        // an expression reading it without has() fails (the testbed showed a policy that read
        // request.subResource on a create deny every create there, and pass here).
        for (key, value) in
            [("subResource", self.subresource), ("name", Some(self.name)), ("namespace", self.namespace)]
        {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                request.insert(key.into(), v.into());
            }
        }
        Value::Object(request)
    }
}

/// Applies every bound policy to the write; the first denial is the answer.
pub fn admit(store: &impl View, a: &Attributes<'_>) -> Result<(), ApiError> {
    if a.rt.group == GROUP {
        return Ok(());
    }
    let (Some(policies), Some(bindings)) = (store.lookup(GROUP, "v1", POLICIES), store.lookup(GROUP, "v1", BINDINGS))
    else {
        return Ok(());
    };
    let budget = Budget::new();
    let mut request = None;
    let namespace =
        a.namespace.and_then(|ns| store.lookup("", "v1", "namespaces").and_then(|rt| store.peek(rt, None, ns)));
    for binding in store.objects(bindings) {
        let policy_name = binding.pointer("/spec/policyName").and_then(Value::as_str).unwrap_or("");
        let Some(policy) = store.peek(policies, None, policy_name) else { continue };
        let policy_spec = policy.get("spec").unwrap_or(&Value::Null);
        if !matches(policy_spec.get("matchConstraints"), a, namespace, true)
            || !matches(binding.pointer("/spec/matchResources"), a, namespace, false)
        {
            continue;
        }
        let actions = binding.pointer("/spec/validationActions").and_then(Value::as_array);
        let deny = actions.into_iter().flatten().any(|x| x == "Deny");
        let request = request.get_or_insert_with(|| a.request());
        let compiled = compiled(policy);
        let verdict = evaluate(&compiled, a, request, namespace, &budget);
        let fail_open = compiled.fail_open;
        let refusal = match verdict {
            Verdict::Admit => None,
            Verdict::Deny { reason, message } => Some((reason, message)),
            Verdict::Error(_) if fail_open => None,
            Verdict::Error(message) => Some((String::new(), message)),
        };
        if let (Some((reason, message)), true) = (refusal, deny) {
            let binding_name = binding.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let resource = a.rt.display_name();
            let text = format!(
                "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {message}"
            );
            let whole = if a.name.is_empty() {
                format!("{resource} is forbidden: {text}")
            } else {
                format!("{resource} {:?} is forbidden: {text}", a.name)
            };
            return Err(ApiError::with_reason(&reason, whole));
        }
    }
    Ok(())
}

enum Verdict {
    Admit,
    Deny { reason: String, message: String },
    Error(String),
}

/// A policy's expressions, compiled once per version of the policy (its UID and
/// resourceVersion), as kube-apiserver compiles a policy when it changes rather than per
/// request: looking every expression up by its text (hashing a few hundred bytes per
/// validation) and reading the spec again on every write was a part of each hub write (issue
/// #39).
#[derive(Debug)]
struct Compiled {
    /// `paramKind` is set, which this server does not support.
    params: bool,
    /// `failurePolicy: Ignore`.
    fail_open: bool,
    /// In the policy's order: a variable reads only those before it.
    variables: Vec<Expression>,
    conditions: Vec<Expression>,
    validations: Vec<Validation>,
}

/// One expression of a policy, its text as written (errors quote it) and its program.
#[derive(Debug)]
struct Expression {
    /// A variable's name (`""` for the other expressions).
    name: String,
    source: String,
    program: Result<Arc<cel::Program>, CelError>,
}

#[derive(Debug)]
struct Validation {
    check: Expression,
    message_expression: Option<Expression>,
    message: Option<String>,
    reason: String,
}

impl Expression {
    fn of(e: &Value, field: &str) -> Expression {
        let text = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("");
        let source = text(field);
        Expression { name: text("name").to_string(), source: source.to_string(), program: cel::compile(source) }
    }
}

impl Compiled {
    fn of(spec: &Value) -> Compiled {
        let list = |f: &str| spec.get(f).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let expressions = |f: &str| list(f).iter().map(|e| Expression::of(e, "expression")).collect();
        let validations = list("validations")
            .iter()
            .map(|v| Validation {
                check: Expression::of(v, "expression"),
                message_expression: v.get("messageExpression").map(|_| Expression::of(v, "messageExpression")),
                message: v.get("message").and_then(Value::as_str).map(str::to_string),
                reason: v.get("reason").and_then(Value::as_str).unwrap_or("Invalid").to_string(),
            })
            .collect();
        Compiled {
            params: spec.get("paramKind").is_some(),
            fail_open: spec.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
            variables: expressions("variables"),
            conditions: expressions("matchConditions"),
            validations,
        }
    }
}

/// Policies compiled, by UID and resourceVersion; at most this many are kept.
const COMPILED_POLICIES: usize = 256;

/// The stored policy compiled: once per version of it.
fn compiled(policy: &Value) -> Arc<Compiled> {
    type Cache = Mutex<HashMap<(String, String), Arc<Compiled>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let spec = policy.get("spec").unwrap_or(&Value::Null);
    let meta = |f: &str| policy.get("metadata").and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("");
    let key = (meta("uid"), meta("resourceVersion"));
    if key.0.is_empty() || key.1.is_empty() {
        return Arc::new(Compiled::of(spec));
    }
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(key.0.to_string(), key.1.to_string())) {
        return hit.clone();
    }
    // Compiled outside the lock: a new expression is parsed on a thread of its own.
    let compiled = Arc::new(Compiled::of(spec));
    let mut entries = cache.lock().unwrap_or_else(|e| e.into_inner());
    if entries.len() >= COMPILED_POLICIES {
        entries.clear();
    }
    entries.insert((key.0.to_string(), key.1.to_string()), compiled.clone());
    compiled
}

fn evaluate(
    policy: &Compiled,
    a: &Attributes<'_>,
    request: &Value,
    namespace: Option<&Value>,
    budget: &Arc<Budget>,
) -> Verdict {
    if policy.params {
        return Verdict::Error("failed to configure policy: paramKind is not supported by this server".into());
    }
    let inputs =
        [("object", a.object), ("oldObject", a.old), ("request", Some(request)), ("namespaceObject", namespace)];
    let inputs = match cel::Inputs::new(inputs) {
        Ok(i) => i,
        Err(e) => return Verdict::Error(e.to_string()),
    };
    let mut scope = match cel::Scope::new(&inputs, budget) {
        Ok(s) => s,
        Err(e) => return Verdict::Error(e.to_string()),
    };
    let mut variables = Variables::new(&policy.variables);
    scope.set("variables", &Value::Object(serde_json::Map::new()));
    // Match conditions see no variables (`variables` is bound empty for them); validations
    // and their messages have what they read evaluated first.
    let mut run = |e: &Expression, scope: &mut cel::Scope<'_>, with_variables: bool| -> Result<cel::Value, String> {
        let source = &e.source;
        let program = e.program.as_ref().map_err(|e| format!("compilation failed for expression '{source}': {e}"))?;
        let failed = |e: CelError| match e {
            CelError::Budget => format!("expression '{source}' exceeded the cost budget"),
            e => format!("expression '{source}' resulted in error: {e}"),
        };
        // Decided by its first comparisons (which kind of write this is), it reads no variable,
        // and none is evaluated: kube-apiserver's are evaluated when first read.
        if let Some(decided) = scope.decided(program).map_err(failed)? {
            return Ok(cel::Value::Bool(decided));
        }
        // A variable that failed is left unbound: the expression fails where it reads it (its
        // error then named, as the cause), unless CEL's `||` or `&&` absorb that error, as
        // cel-go's do an error value.
        let cause = if with_variables { variables.ready(program, scope) } else { None };
        scope.evaluate(program).map_err(|e| failed(cause.filter(|_| e != CelError::Budget).unwrap_or(e)))
    };
    for c in &policy.conditions {
        match run(c, &mut scope, false) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Verdict::Admit,
            Ok(_) => return Verdict::Error(format!("matchCondition '{}' does not yield a bool", c.source)),
            Err(e) => return Verdict::Error(e),
        }
    }
    for check in &policy.validations {
        match run(&check.check, &mut scope, true) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let from_expression = check
                    .message_expression
                    .as_ref()
                    .and_then(|m| run(m, &mut scope, true).ok())
                    .and_then(|m| cel::as_string(&m))
                    .filter(|m| !m.trim().is_empty() && !m.contains('\n'));
                let message = from_expression
                    .or_else(|| check.message.clone())
                    .unwrap_or_else(|| format!("failed expression: {}", check.check.source.trim()));
                return Verdict::Deny { reason: check.reason.clone(), message };
            }
            Ok(_) => return Verdict::Error(format!("expression '{}' does not yield a bool", check.check.source)),
            Err(e) => return Verdict::Error(e),
        }
    }
    Verdict::Admit
}

/// A policy's variables, each evaluated the first time an expression reads it and kept for the
/// rest of the request, as kube-apiserver's composition evaluates them (a `lazy.MapValue`): a
/// variable nothing reads costs nothing and cannot fail the request, and one that fails fails
/// the expressions that read it, with its error (unless `||` or `&&` absorb it).
struct Variables<'s> {
    /// In the policy's order: a variable reads only those before it.
    declared: &'s [Expression],
    /// Per declared variable, once evaluated: its value or its error.
    values: Vec<Option<Result<Value, CelError>>>,
    /// The values so far, as `variables` is bound.
    bound: serde_json::Map<String, Value>,
}

impl<'s> Variables<'s> {
    fn new(declared: &'s [Expression]) -> Self {
        Variables { declared, values: vec![None; declared.len()], bound: serde_json::Map::new() }
    }

    /// Evaluates the variables `program` reads (and those they read) that are not yet, and
    /// binds those that did not fail; the first error among them. What a variable reads comes
    /// before it, so marking from the last down and evaluating from the first up needs no
    /// recursion, however long the chain.
    fn ready(&mut self, program: &cel::Program, scope: &mut cel::Scope<'_>) -> Option<CelError> {
        let visible = self.declared.len();
        let mut needed = vec![false; visible];
        mark(&mut needed, self.declared, program.variables_read());
        for i in (0..visible).rev() {
            if !needed[i] || self.values[i].is_some() {
                continue;
            }
            if let Ok(p) = &self.declared[i].program {
                mark(&mut needed[..i], self.declared, p.variables_read());
            }
        }
        let mut changed = false;
        for (i, variable) in self.declared.iter().enumerate() {
            if !needed[i] || self.values[i].is_some() {
                continue;
            }
            let name = &variable.name;
            let value = match &variable.program {
                Err(e) => Err(CelError::Evaluation(format!("composited variable \"{name}\" fails to compile: {e}"))),
                Ok(p) => {
                    if changed {
                        scope.set("variables", &Value::Object(self.bound.clone()));
                        changed = false;
                    }
                    scope.evaluate(p).and_then(|v| to_json(&v).map_err(CelError::Evaluation))
                }
            };
            if let Ok(v) = &value {
                self.bound.insert(name.clone(), v.clone());
                changed = true;
            }
            self.values[i] = Some(value);
        }
        if changed {
            scope.set("variables", &Value::Object(self.bound.clone()));
        }
        needed.iter().zip(&self.values).find_map(|(n, v)| match v {
            Some(Err(e)) if *n => Some(e.clone()),
            _ => None,
        })
    }
}

/// Marks in `needed` the variables `reads` names (`None`: every one).
fn mark(needed: &mut [bool], declared: &[Expression], reads: Option<&std::collections::BTreeSet<String>>) {
    for (i, n) in needed.iter_mut().enumerate() {
        *n |= reads.is_none_or(|r| r.contains(&declared[i].name));
    }
}

/// A variable's value, kept as JSON between evaluations.
fn to_json(v: &cel::Value) -> Result<Value, String> {
    Ok(match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => Value::from(*f),
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::List(l) => Value::Array(l.iter().map(to_json).collect::<Result<_, _>>()?),
        cel::Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    cel::Key::String(s) => s.to_string(),
                    cel::Key::Int(i) => i.to_string(),
                    cel::Key::Uint(u) => u.to_string(),
                    cel::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            Value::Object(out)
        }
        _ => return Err("a variable's value must be JSON-like (null, bool, number, string, list or map)".into()),
    })
}

/// Whether `criteria` (a policy's matchConstraints or a binding's matchResources) select the
/// write. Absent criteria: everything for a binding, nothing for a policy.
fn matches(criteria: Option<&Value>, a: &Attributes<'_>, namespace: Option<&Value>, required: bool) -> bool {
    let Some(c) = criteria else { return !required };
    let rule_hits = |key: &str| c.get(key).and_then(Value::as_array).into_iter().flatten().any(|r| rule_matches(r, a));
    let has_rules = c.get("resourceRules").and_then(Value::as_array).is_some_and(|r| !r.is_empty());
    if (has_rules || required) && !rule_hits("resourceRules") {
        return false;
    }
    if rule_hits("excludeResourceRules") {
        return false;
    }
    let labels = |o: Option<&Value>| o.and_then(|o| o.pointer("/metadata/labels")).cloned().unwrap_or(Value::Null);
    if let Some(sel) = c.get("objectSelector")
        && !selector_matches(sel, &labels(a.object))
        && !selector_matches(sel, &labels(a.old))
    {
        return false;
    }
    if let Some(sel) = c.get("namespaceSelector") {
        let target = if a.rt.group.is_empty() && a.rt.plural == "namespaces" {
            Some(labels(a.object.or(a.old)))
        } else if a.rt.namespaced {
            Some(labels(namespace))
        } else {
            None // cluster-scoped: the namespace selector does not apply
        };
        if target.is_some_and(|l| !selector_matches(sel, &l)) {
            return false;
        }
    }
    true
}

fn rule_matches(rule: &Value, a: &Attributes<'_>) -> bool {
    let list = |k: &str| -> Vec<&str> {
        rule.get(k).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
    };
    let has = |k: &str, v: &str| list(k).iter().any(|x| *x == "*" || *x == v);
    let resource_ok = list("resources").iter().any(|r| {
        let (res, sub) = r.split_once('/').map_or((*r, None), |(a, b)| (a, Some(b)));
        let res_ok = res == "*" || res == a.rt.plural;
        match (sub, a.subresource) {
            (None, None) => res_ok,
            (None, Some(_)) => false,
            (Some(s), Some(want)) => res_ok && (s == "*" || s == want),
            (Some(s), None) => res_ok && s == "*" && res == "*",
        }
    });
    let names = list("resourceNames");
    let scope_ok = match rule.get("scope").and_then(Value::as_str) {
        Some("Cluster") => !a.rt.namespaced,
        Some("Namespaced") => a.rt.namespaced,
        _ => true,
    };
    has("operations", a.operation.as_str())
        && has("apiGroups", &a.rt.group)
        && has("apiVersions", &a.rt.version)
        && resource_ok
        && scope_ok
        && (names.is_empty() || names.contains(&a.name))
}

/// A metav1.LabelSelector against labels: matchLabels and matchExpressions (In, NotIn, Exists,
/// DoesNotExist). An empty selector selects everything.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_label = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expression = selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> =
            e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        match e.get("operator").and_then(Value::as_str) {
            Some("In") => label(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") => label(key).is_some(),
            Some("DoesNotExist") => label(key).is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}
