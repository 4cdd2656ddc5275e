//! CEL, as the API server evaluates it for ValidatingAdmissionPolicies and for CRDs'
//! `x-kubernetes-validations`: compiling an expression once (cached by its text), binding JSON
//! values to its variables, and evaluating it within a budget.
//!
//! The evaluator is the `cel` crate (cel-rust). What this module adds is the bound the real
//! server gets from its cost estimator: an expression longer than [`MAX_EXPRESSION_BYTES`],
//! nested deeper than [`MAX_AST_DEPTH`] or larger than [`MAX_AST_NODES`] does not compile; inputs
//! larger than [`MAX_INPUT_VALUES`] are not evaluated; and every evaluation charges a shared
//! [`Budget`] — one unit per comprehension step and per call, plus the size of each list, map or
//! string a call is given — so nested loops over large lists, or lists built up step by step,
//! stop at [`COST_LIMIT`] units or [`TIME_LIMIT`], whichever comes first. Parsing runs on a
//! thread of its own with a large stack, and a panic inside the crate is an error, not a crash.

mod shortcut;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, operators};
use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt};
use cel::common::value::{CowVal, Val};
use cel::objects::Map;
use cel::{Context, Env, ExecutionError, FunctionContext};

/// CEL values and map keys, as the `cel` crate has them.
pub use ::cel::Value;
pub use ::cel::objects::Key;

/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 8 * 1024;
/// How deep the parser may recurse.
pub const MAX_PARSE_NESTING: u16 = 32;
/// How deep a compiled expression may nest: evaluation recurses once per level.
pub const MAX_AST_DEPTH: usize = 48;
/// How many nodes a compiled expression may have.
pub const MAX_AST_NODES: usize = 4_000;
/// The most JSON values (objects, arrays and scalars, counted through the nesting) bound to
/// one evaluation's variables.
pub const MAX_INPUT_VALUES: usize = 200_000;
/// Cost units one request's expressions may spend together (Kubernetes' per-request budget is
/// of the same order: 10^7 of its units).
pub const COST_LIMIT: u64 = 2_000_000;
/// Wall time one request's expressions may take together.
pub const TIME_LIMIT: Duration = Duration::from_millis(250);
/// Distinct expressions kept compiled; the cache starts over when full.
const CACHE_ENTRIES: usize = 4_096;
/// The stack of the thread that parses: the grammar recurses once per operator.
const PARSER_STACK_BYTES: usize = 64 * 1024 * 1024;
/// The function the budget is charged through; not a name CEL source can call (`__` is
/// reserved for the implementation).
const CHARGE: &str = "__stowage_charge";
/// The function `s.matches('re')` with a constant pattern is evaluated by: the standard one
/// compiles `re` on every call, a TrainJob's name rule made each of its writes compile a regex.
/// cel-go, which Kubernetes runs, compiles a constant pattern once; here each is compiled once
/// and kept ([`REGEXES`] of them at most).
const MATCHES: &str = "__stowage_matches";
/// The compiled patterns [`MATCHES`] keeps; past it they are all compiled again as met.
const REGEXES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    #[error("the expression is {len} bytes long, more than the {MAX_EXPRESSION_BYTES} allowed")]
    TooLong { len: usize },
    #[error("compilation failed: {0}")]
    Compile(String),
    #[error(
        "the expression is too complex: nested deeper than {MAX_AST_DEPTH} levels or more than {MAX_AST_NODES} parts"
    )]
    TooComplex,
    #[error("the input has more than {MAX_INPUT_VALUES} values, too many to evaluate")]
    InputTooLarge,
    #[error("evaluation exceeded the cost budget ({COST_LIMIT} units or {} ms per request)", TIME_LIMIT.as_millis())]
    Budget,
    #[error("{0}")]
    Evaluation(String),
}

impl CelError {
    /// A stable name for metrics and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            CelError::TooLong { .. } => "too_long",
            CelError::Compile(_) => "compile",
            CelError::TooComplex => "too_complex",
            CelError::InputTooLarge => "input_too_large",
            CelError::Budget => "budget",
            CelError::Evaluation(_) => "evaluation",
        }
    }
}

/// A compiled expression, its calls instrumented to charge the budget.
#[derive(Debug)]
pub struct Program {
    source: String,
    expr: IdedExpr,
    /// Every name the expression reads (variables, and a comprehension's own): only these are
    /// bound when it runs, since binding converts a whole object into the evaluator's values.
    names: BTreeSet<String>,
    /// The fields it selects of `variables` (`variables.isAgent`: `isAgent`); `None` when it
    /// reads `variables` otherwise (whole, indexed): a policy's variables are evaluated when an
    /// expression reads them, as kube-apiserver's are.
    variables: Option<BTreeSet<String>>,
    /// The leading comparisons that may decide it without the interpreter.
    shortcut: Option<shortcut::Shortcut>,
    /// The `has()` tests `expr` answers from the inputs' JSON ([`PRESENT`]), each as its
    /// input's name, the fields down to the tested one's map, and the tested field.
    present: Vec<Vec<String>>,
    /// `expr` as written, for an evaluation where one of `present` cannot be answered so.
    as_written: Option<IdedExpr>,
}

impl Program {
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression names `variable` (e.g. `oldSelf`, which makes a rule a
    /// transition rule).
    pub fn references(&self, variable: &str) -> bool {
        self.names.contains(variable)
    }

    /// The policy variables it reads by name; `None`: possibly any.
    pub fn variables_read(&self) -> Option<&BTreeSet<String>> {
        if !self.names.contains(VARIABLES) {
            return Some(&NONE);
        }
        self.variables.as_ref()
    }
}

/// The identifier a policy's variables are read through.
const VARIABLES: &str = "variables";
static NONE: BTreeSet<String> = BTreeSet::new();

/// `e`'s direct subexpressions.
fn each_child<'e>(e: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    let mut entry = |x: &'e EntryExpr| match x {
        EntryExpr::MapEntry(m) => {
            f(&m.key);
            f(&m.value);
        }
        EntryExpr::StructField(s) => f(&s.value),
    };
    match &e.expr {
        Expr::Call(c) => c.target.iter().map(|t| &**t).chain(&c.args).for_each(&mut *f),
        Expr::Comprehension(c) => {
            for x in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(f),
        Expr::Map(m) => m.entries.iter().for_each(|x| entry(&x.expr)),
        Expr::Struct(s) => s.entries.iter().for_each(|x| entry(&x.expr)),
        Expr::Select(s) => f(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// The identifiers `e` reads, into `out`.
fn names(e: &IdedExpr, out: &mut BTreeSet<String>) {
    if let Expr::Ident(n) = &e.expr {
        out.insert(n.clone());
    }
    each_child(e, &mut |c| names(c, out));
}

/// The fields `e` selects of `ident`, into `out`; `out` becomes `None` where `ident` is read
/// otherwise.
fn selected(e: &IdedExpr, ident: &str, out: &mut Option<BTreeSet<String>>) {
    match &e.expr {
        Expr::Select(s) if matches!(&s.operand.expr, Expr::Ident(n) if n == ident) => {
            if let Some(fields) = out {
                fields.insert(s.field.clone());
            }
        }
        Expr::Ident(n) if n == ident => *out = None,
        _ => each_child(e, &mut |c| selected(c, ident, out)),
    }
}

/// Compiles `source`, or returns the program compiled from the same text before.
pub fn compile(source: &str) -> Result<Arc<Program>, CelError> {
    type Cache = Mutex<HashMap<String, Result<Arc<Program>, CelError>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    if source.len() > MAX_EXPRESSION_BYTES {
        return Err(CelError::TooLong { len: source.len() });
    }
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(source) {
        return hit.clone();
    }
    let text = source.to_string();
    let compiled = std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSER_STACK_BYTES)
        .spawn(move || parse(&text))
        .map_err(|e| CelError::Compile(format!("no thread to parse on: {e}")))?
        .join()
        .unwrap_or_else(|_| Err(CelError::Compile("the parser failed on this expression".into())));
    let mut entries = cache.lock().unwrap_or_else(|e| e.into_inner());
    if entries.len() >= CACHE_ENTRIES {
        entries.clear();
    }
    entries.insert(source.to_string(), compiled.clone());
    compiled
}

/// On the parser's own thread: parse, check the shape, instrument. A rejected tree is dropped
/// here too (dropping recurses as deep as the tree).
fn parse(source: &str) -> Result<Arc<Program>, CelError> {
    let expr = cel::parser::Parser::new()
        .max_recursion_depth(MAX_PARSE_NESTING)
        .parse(source)
        .map_err(|e| CelError::Compile(one_line(&e.to_string())))?;
    let mut nodes = 0;
    if !within(&expr, 1, &mut nodes) {
        return Err(CelError::TooComplex);
    }
    let mut read = BTreeSet::new();
    names(&expr, &mut read);
    let mut variables = Some(BTreeSet::new());
    selected(&expr, VARIABLES, &mut variables);
    let shortcut = shortcut::Shortcut::of(&expr);
    let mut present = Vec::new();
    let mut answered = expr.clone();
    answer_presence(&mut answered, &mut Vec::new(), &mut present);
    let (expr, as_written) =
        if present.is_empty() { (instrument(expr), None) } else { (instrument(answered), Some(instrument(expr))) };
    Ok(Arc::new(Program { source: source.to_string(), expr, names: read, variables, shortcut, present, as_written }))
}

/// The prefix of the name a `has()` test on an input's fields is rewritten to
/// (`has(object.metadata.labels)`: `@present:object.metadata.labels`): not a name CEL source
/// can write (`@` is the macros' own). The interpreter resolves the operand of `has()` first,
/// and the inputs' resolver converts what it names whole into the evaluator's maps: a
/// policy's `has(object.metadata.labels)` converted the pod's metadata, managedFields and
/// all, and `has(object.spec.nodeName)` its spec, on every write (issue #39). Rewritten, the
/// resolver answers from the JSON. Only where it can: when a tested field's parent is not a
/// JSON object of the inputs (absent, null, a list, a name the inputs do not bind), the
/// expression as written is evaluated instead, so errors are the interpreter's own.
const PRESENT: &str = "@present:";

/// Rewrites each `has(name.a.b)` whose operand is a chain of fields on a name not bound by an
/// enclosing comprehension (`bound`) into [`PRESENT`] and the path, pushed onto `paths`.
/// `has()` is not a call, so it is charged nothing either way; where it is an argument, the
/// charge wraps the rewritten name and charges its bool alike.
fn answer_presence(e: &mut IdedExpr, bound: &mut Vec<String>, paths: &mut Vec<Vec<String>>) {
    if let Expr::Select(s) = &e.expr
        && s.test
        && let Some(mut path) = shortcut::field_of(&s.operand)
        && !bound.contains(&path[0])
    {
        path.push(s.field.clone());
        if path.iter().all(|p| !p.is_empty() && !p.contains(['.', ':'])) {
            e.expr = Expr::Ident(format!("{PRESENT}{}", path.join(".")));
            paths.push(path);
            return;
        }
    }
    match &mut e.expr {
        Expr::Comprehension(c) => {
            // Its variables, bound for all of it (a name they shadow is left as written).
            let n = bound.len();
            bound.extend([c.iter_var.clone(), c.accu_var.clone()].into_iter().chain(c.iter_var2.clone()));
            for x in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                answer_presence(x, bound, paths);
            }
            bound.truncate(n);
        }
        Expr::Call(c) => {
            for x in c.target.iter_mut().map(|t| &mut **t).chain(&mut c.args) {
                answer_presence(x, bound, paths);
            }
        }
        Expr::List(l) => l.elements.iter_mut().for_each(|x| answer_presence(x, bound, paths)),
        Expr::Map(m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    answer_presence(&mut me.key, bound, paths);
                    answer_presence(&mut me.value, bound, paths);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &mut st.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    answer_presence(&mut f.value, bound, paths);
                }
            }
        }
        Expr::Select(s) => answer_presence(&mut s.operand, bound, paths),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether the tree is at most [`MAX_AST_DEPTH`] deep and [`MAX_AST_NODES`] large; stops
/// descending as soon as it is not.
fn within(e: &IdedExpr, depth: usize, nodes: &mut usize) -> bool {
    *nodes += 1;
    if depth > MAX_AST_DEPTH || *nodes > MAX_AST_NODES {
        return false;
    }
    let mut child = |c: &IdedExpr| within(c, depth + 1, nodes);
    match &e.expr {
        Expr::Call(c) => c.target.as_deref().is_none_or(&mut child) && c.args.iter().all(child),
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result].into_iter().all(child)
        }
        Expr::List(l) => l.elements.iter().all(child),
        Expr::Map(m) => m.entries.iter().all(|x| match &x.expr {
            EntryExpr::MapEntry(m) => child(&m.key) && child(&m.value),
            EntryExpr::StructField(f) => child(&f.value),
        }),
        Expr::Struct(s) => s.entries.iter().all(|x| match &x.expr {
            EntryExpr::MapEntry(m) => child(&m.key) && child(&m.value),
            EntryExpr::StructField(f) => child(&f.value),
        }),
        Expr::Select(s) => child(&s.operand),
        Expr::Literal(_) | Expr::Ident(_) => true,
        Expr::Unspecified => false,
    }
}

/// `__charge(e)`: evaluates to `e`, charging the budget for it first.
fn charged(e: IdedExpr) -> IdedExpr {
    IdedExpr { id: e.id, expr: Expr::Call(CallExpr { func_name: CHARGE.into(), target: None, args: vec![e] }) }
}

/// Every call's target and arguments go through [`CHARGE`], and every comprehension step does
/// once. The accumulator plumbing of `all`/`exists` (`@result && x`) and of `map`/`filter`
/// (`@result + [x]`) is left as the macros wrote it, so the evaluator still recognises those
/// loops (it short-circuits the first and appends in place for the second).
fn instrument(e: IdedExpr) -> IdedExpr {
    let IdedExpr { id, expr } = e;
    let expr = match expr {
        // `s.matches('re')` as [`MATCHES`]`(s, 're')`, charged alike; a pattern computed from
        // the input is left to the standard function, so the patterns kept are the
        // expressions' own, bounded as the programs are.
        Expr::Call(CallExpr { func_name, target: Some(target), args })
            if func_name == "matches"
                && matches!(args.as_slice(), [IdedExpr { expr: Expr::Literal(LiteralValue::String(_)), .. }]) =>
        {
            let args = std::iter::once(*target).chain(args).map(|x| charged(instrument(x))).collect();
            Expr::Call(CallExpr { func_name: MATCHES.into(), target: None, args })
        }
        Expr::Call(CallExpr { func_name, target, args }) => {
            let short_circuit =
                matches!(func_name.as_str(), operators::LOGICAL_AND | operators::LOGICAL_OR | operators::CONDITIONAL);
            let wrap = |x: IdedExpr| if short_circuit { instrument(x) } else { charged(instrument(x)) };
            Expr::Call(CallExpr {
                target: target.map(|t| Box::new(wrap(*t))),
                args: args.into_iter().map(wrap).collect(),
                func_name,
            })
        }
        Expr::Comprehension(c) => Expr::Comprehension(Box::new(instrument_loop(*c))),
        Expr::List(l) => Expr::List(ListExpr {
            elements: l.elements.into_iter().map(instrument).collect(),
            optional_indices: l.optional_indices,
        }),
        Expr::Map(mut m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    me.key = instrument(std::mem::take(&mut me.key));
                    me.value = instrument(std::mem::take(&mut me.value));
                }
            }
            Expr::Map(m)
        }
        Expr::Select(mut s) => {
            s.operand = Box::new(instrument(*s.operand));
            Expr::Select(s)
        }
        other => other,
    };
    IdedExpr { id, expr }
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name)
}

/// `@result + [x]`: the items appended, when `step` is that.
fn appended<'e>(step: &'e mut IdedExpr, accu: &str) -> Option<&'e mut ListExpr> {
    match &mut step.expr {
        Expr::Call(call) if call.func_name == operators::ADD && call.target.is_none() => match call.args.as_mut_slice()
        {
            [lhs, rhs] if is_ident(lhs, accu) => match &mut rhs.expr {
                Expr::List(l) => Some(l),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

fn instrument_loop(mut c: ComprehensionExpr) -> ComprehensionExpr {
    c.iter_range = instrument(std::mem::take(&mut c.iter_range));
    c.accu_init = instrument(std::mem::take(&mut c.accu_init));
    let accu = c.accu_var.clone();
    let literal_cond = matches!(c.loop_cond.expr, Expr::Literal(_));
    let folds = matches!(&c.loop_step.expr, Expr::Call(call)
        if (call.func_name == operators::LOGICAL_AND || call.func_name == operators::LOGICAL_OR)
            && call.target.is_none()
            && call.args.first().is_some_and(|a| is_ident(a, &accu)));
    if folds {
        // all / exists: charge each step's condition, instrument the predicate.
        if let Expr::Call(call) = &mut c.loop_step.expr
            && let Some(x) = call.args.get_mut(1)
        {
            *x = instrument(std::mem::take(x));
        }
        c.loop_cond = charged(std::mem::take(&mut c.loop_cond));
        return c;
    }
    if literal_cond && is_ident(&c.result, &accu) {
        // map / filter: `@result + [x]`, maybe guarded as `g ? @result + [x] : @result`.
        let step = &mut c.loop_step;
        if let Some(items) = appended(step, &accu) {
            items.elements = std::mem::take(&mut items.elements).into_iter().map(|x| charged(instrument(x))).collect();
            return c;
        }
        if let Expr::Call(call) = &mut step.expr
            && call.func_name == operators::CONDITIONAL
            && call.args.len() == 3
            && is_ident(&call.args[2], &accu)
        {
            let (guard, rest) = call.args.split_at_mut(1);
            if let Some(items) = appended(&mut rest[0], &accu) {
                guard[0] = charged(instrument(std::mem::take(&mut guard[0])));
                items.elements = std::mem::take(&mut items.elements).into_iter().map(instrument).collect();
                return c;
            }
        }
    }
    // Any other loop: charge its condition and its step.
    c.loop_cond = charged(instrument(std::mem::take(&mut c.loop_cond)));
    c.loop_step = charged(instrument(std::mem::take(&mut c.loop_step)));
    c.result = instrument(std::mem::take(&mut c.result));
    c
}

/// What one request's expressions may still spend; shared by all of them.
#[derive(Debug)]
pub struct Budget {
    spent: AtomicU64,
    exceeded: AtomicBool,
    deadline: Instant,
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Arc::new(Budget {
            spent: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
            deadline: Instant::now() + TIME_LIMIT,
        })
    }

    fn charge(&self, units: u64) -> Result<(), ExecutionError> {
        let spent = self.spent.fetch_add(units, Ordering::Relaxed).saturating_add(units);
        if spent > COST_LIMIT || Instant::now() > self.deadline {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(ExecutionError::function_error(CHARGE, "cost budget exceeded"));
        }
        Ok(())
    }

    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }
}

type RawFunction =
    Box<dyn for<'c, 'k> Fn(&mut FunctionContext<'c, 'k>) -> Result<CowVal<'c, 'k>, ExecutionError> + Send + Sync>;

fn charge_function(budget: Arc<Budget>) -> RawFunction {
    Box::new(move |ftx| {
        let value = ftx.args.pop().ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
        let size = value.as_sizer().map_or(0, |s| (*s.size().inner()).max(0) as u64);
        budget.charge(1 + size)?;
        Ok(value)
    })
}

/// [`MATCHES`]: `this.matches(pattern)` as the standard library answers it (its errors too),
/// each pattern compiled once.
fn matches_function() -> RawFunction {
    type Compiled = Result<Arc<regex::Regex>, String>;
    static COMPILED: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    Box::new(|ftx| {
        let (Some(pattern), Some(this)) = (ftx.args.pop(), ftx.args.pop()) else {
            return Err(ExecutionError::invalid_argument_count(2, ftx.args.len()));
        };
        let (Some(text), Some(pattern)) =
            (this.downcast_ref::<CelString<'_>>(), pattern.downcast_ref::<CelString<'_>>())
        else {
            let types = [&this, &pattern].map(|v| v.get_type().name().to_owned()).to_vec();
            return Err(ExecutionError::no_such_member_overload("matches", types));
        };
        let cache = COMPILED.get_or_init(Default::default);
        let mut compiled = cache.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.len() >= REGEXES && !compiled.contains_key(pattern.inner()) {
            compiled.clear();
        }
        let regex = compiled
            .entry(pattern.inner().to_string())
            .or_insert_with(|| {
                regex::Regex::new(pattern.inner())
                    .map(Arc::new)
                    .map_err(|e| format!("'{}' not a valid regex:\n{e}", pattern.inner()))
            })
            .clone();
        drop(compiled);
        match regex {
            Ok(re) => Ok(CowVal::owned(CelBool::from(re.is_match(text.inner())))),
            Err(message) => Err(ExecutionError::FunctionError { function: "matches".into(), message }),
        }
    })
}

fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

/// Inputs for every expression evaluated over them: a policy's `object`, `oldObject`,
/// `request` and `namespaceObject`, or a CRD rule's `self` and `oldSelf`. Each is converted
/// from JSON the first time an expression reads it, once for all the expressions of a scope,
/// its strings borrowed; one no expression reaches is never converted. A policy's validations
/// mostly begin by asking which resource a request is for, so a Placement's status write
/// converted both versions of the Placement and read neither (issue #39).
pub struct Inputs<'v> {
    bound: Vec<Input<'v>>,
}

struct Input<'v> {
    name: &'static str,
    json: Option<&'v serde_json::Value>,
    /// How many values `json` holds (up to the bound).
    values: usize,
    /// How many values its fields read alone have converted so far.
    read_alone: AtomicUsize,
    converted: OnceLock<Box<dyn Val + 'v>>,
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.bound.iter().map(|i| i.name)).finish()
    }
}

impl<'v> Inputs<'v> {
    /// The inputs (an absent one is `null`), refusing more than [`MAX_INPUT_VALUES`] values in
    /// all, read or not: what is bounded is what a request may bring.
    pub fn new(
        inputs: impl IntoIterator<Item = (&'static str, Option<&'v serde_json::Value>)>,
    ) -> Result<Self, CelError> {
        let mut left = MAX_INPUT_VALUES;
        let mut bound = Vec::new();
        for (name, v) in inputs {
            let values = v.map_or(0, |v| count_values(v, left));
            if values > left {
                return Err(CelError::InputTooLarge);
            }
            left -= values;
            bound.push(Input { name, json: v, values, read_alone: AtomicUsize::new(0), converted: OnceLock::new() });
        }
        Ok(Inputs { bound })
    }
}

impl Inputs<'_> {
    /// Whether the JSON object at `path`'s first names (an input, then its fields) has the
    /// last as a key, as `has()` tests a map; `None` when there is no such object.
    fn present<S: AsRef<str>>(&self, path: &[S]) -> Option<bool> {
        let (field, parent) = path.split_last()?;
        let (input, fields) = parent.split_first()?;
        let mut value = self.bound.iter().find(|i| i.name == input.as_ref())?.json?;
        for f in fields {
            value = value.as_object()?.get(f.as_ref())?;
        }
        Some(value.as_object()?.contains_key(field.as_ref()))
    }
}

impl cel::context::VariableResolver for Inputs<'_> {
    /// The interpreter asks for a qualified name (`oldObject.spec.cluster`) before its prefixes,
    /// so a field read converts only that field's value: a policy reading one field of a
    /// Placement converted the whole Placement, managedFields and all, on every write (issue
    /// #39). Each read converts again, so once the fields read alone have converted as many
    /// values as the input holds, the input is converted whole, once, and read from (at most
    /// twice the work of converting it whole at first). A name not found as JSON fields is
    /// left to the shorter names, and so to the whole input, as before.
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if let Some(path) = variable.strip_prefix(PRESENT) {
            let path: Vec<&str> = path.split('.').collect();
            return self.present(&path).map(|b| CowVal::Owned(Box::new(CelBool::from(b))));
        }
        let (name, fields) = match variable.split_once('.') {
            Some((name, fields)) => (name, Some(fields)),
            None => (variable, None),
        };
        let input = self.bound.iter().find(|i| i.name == name)?;
        if let Some(fields) = fields {
            if input.converted.get().is_some() {
                return None;
            }
            let mut value = input.json?;
            for field in fields.split('.') {
                value = value.as_object()?.get(field)?;
            }
            let n = count_values(value, input.values);
            let read = input.read_alone.fetch_add(n, Ordering::Relaxed).saturating_add(n);
            return (read <= input.values).then(|| CowVal::Owned(borrowed(value)));
        }
        let value = input.converted.get_or_init(|| match input.json {
            Some(v) => borrowed(v),
            None => Box::new(CelNull),
        });
        Some(CowVal::Borrowed(value.as_ref()))
    }
}

impl shortcut::Fields for Inputs<'_> {
    fn string_at(&self, input: &str, path: &[String]) -> Option<&str> {
        let mut value = self.bound.iter().find(|i| i.name == input)?.json?;
        for field in path {
            value = value.as_object()?.get(field)?;
        }
        value.as_str()
    }

    fn present(&self, path: &[String]) -> Option<bool> {
        Inputs::present(self, path)
    }
}

/// A context for evaluating expressions over [`Inputs`], all charging one [`Budget`].
pub struct Scope<'v> {
    ctx: Context<'v, 'v>,
    budget: Arc<Budget>,
    /// The inputs, as [`Scope::decided`] reads them.
    fields: &'v dyn shortcut::Fields,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("budget", &self.budget).finish_non_exhaustive()
    }
}

impl<'v> Scope<'v> {
    /// Evaluations read `inputs` and charge `budget`.
    pub fn new<'i: 'v>(inputs: &'v Inputs<'i>, budget: &Arc<Budget>) -> Result<Scope<'v>, CelError> {
        let mut ctx = Context::with_env(env());
        ctx.add_function(CHARGE, charge_function(budget.clone()))
            .and_then(|()| ctx.add_function(MATCHES, matches_function()))
            .map_err(|e| CelError::Evaluation(format!("the evaluator could not be set up: {e}")))?;
        ctx.set_variable_resolver(inputs);
        Ok(Scope { ctx, budget: budget.clone(), fields: inputs })
    }

    /// `program`'s value when its leading comparisons decide it (`shortcut`), charged as the
    /// interpreter would charge them; `None`: only [`Scope::evaluate`] can tell, and nothing
    /// was charged. Names bound with [`Scope::set`] are not read here: a shortcut reads inputs.
    pub fn decided(&self, program: &Program) -> Result<Option<bool>, CelError> {
        let Some(shortcut) = &program.shortcut else { return Ok(None) };
        if self.budget.exceeded() {
            return Err(CelError::Budget);
        }
        let Some((value, charges)) = shortcut.decide(self.fields) else { return Ok(None) };
        for units in charges {
            self.budget.charge(units).map_err(|_| CelError::Budget)?;
        }
        Ok(Some(value))
    }

    /// Binds (or binds again) a small owned value, such as a policy's `variables` as they grow.
    pub fn set(&mut self, name: &'static str, value: &serde_json::Value) {
        self.ctx.add_variable_from_value(name, to_cel(value));
    }

    /// Evaluates `program` here, charging the scope's budget.
    pub fn evaluate(&self, program: &Program) -> Result<Value, CelError> {
        if self.budget.exceeded() {
            return Err(CelError::Budget);
        }
        // The `has()` tests answered from the JSON, if every one of them can be (evaluated or
        // not: reading the JSON has no effect and costs no budget); else the expression as
        // written, whose errors are then the interpreter's.
        match &program.as_written {
            Some(written) if program.present.iter().any(|path| self.fields.present(path).is_none()) => {
                self.run(written)
            }
            _ => self.run(&program.expr),
        }
    }

    fn run(&self, expr: &IdedExpr) -> Result<Value, CelError> {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Value::resolve(expr, &self.ctx)));
        match run {
            _ if self.budget.exceeded() => Err(CelError::Budget),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(CelError::Evaluation(e.to_string())),
            Err(_) => Err(CelError::Evaluation("the evaluator failed on this input".into())),
        }
    }

    /// Evaluates a rule that must yield a bool.
    pub fn evaluate_bool(&self, program: &Program) -> Result<bool, CelError> {
        match self.evaluate(program)? {
            Value::Bool(b) => Ok(b),
            other => Err(CelError::Evaluation(format!("the expression yields {}, not a bool", type_name(&other)))),
        }
    }
}

/// A JSON value as the evaluator's value, its strings and keys borrowed: integers as `int`
/// (`uint` beyond its range), other numbers as `double`, as [`to_cel`].
fn borrowed(v: &serde_json::Value) -> Box<dyn Val + '_> {
    match v {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        serde_json::Value::String(s) => Box::new(CelString::from(s.as_str())),
        serde_json::Value::Array(a) => Box::new(CelList::from(a.iter().map(borrowed).collect::<Vec<_>>())),
        serde_json::Value::Object(o) => Box::new(CelMap::from(
            o.iter().map(|(k, v)| (CelMapKey::from(k.as_str()), borrowed(v))).collect::<HashMap<_, _>>(),
        )),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::Bool(_) => "bool",
        Value::Null => "null",
        _ => "a value of another type",
    }
}

/// How many values `v` holds, counting through its nesting; stops counting past `limit`.
pub fn count_values(v: &serde_json::Value, limit: usize) -> usize {
    let mut n = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        n += 1;
        if n > limit {
            break;
        }
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter()),
            serde_json::Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    n
}

/// A JSON value as CEL sees it: integers as `int` (`uint` beyond its range), other numbers as
/// `double`.
pub fn to_cel(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(to_cel).collect())),
        serde_json::Value::Object(o) => {
            let map: HashMap<Key, Value> =
                o.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL value as text, for a `messageExpression`'s result.
pub fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_program_names_the_policy_variables_it_reads_or_says_it_may_read_any() {
        let read = |source: &str| {
            compile(source).expect("compiles").variables_read().map(|r| r.iter().cloned().collect::<Vec<_>>())
        };
        let some = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect::<Vec<_>>());
        assert_eq!(read("object.spec.x == 1"), some(&[]));
        assert_eq!(read("variables.b + variables.a == variables.b"), some(&["a", "b"]));
        assert_eq!(read("has(variables.c) && [1].all(x, variables.d > x)"), some(&["c", "d"]));
        // Read whole, indexed, or handed to a function: any of them may be read.
        assert_eq!(read("variables['a'] == 1"), None);
        assert_eq!(read("variables.size() > 0"), None);
        assert_eq!(read("[variables].size() == 1 || variables.a"), None);
    }

    fn eval(source: &str, vars: &[(&'static str, serde_json::Value)]) -> Result<Value, CelError> {
        let p = compile(source)?;
        let inputs = Inputs::new(vars.iter().map(|(n, v)| (*n, Some(v))))?;
        Scope::new(&inputs, &Budget::new())?.evaluate(&p)
    }

    /// What a shortcut decides is what the interpreter gives, charged alike; where it cannot
    /// tell (a field absent or not a string, an operand of another form first) it leaves the
    /// expression to the interpreter and charges nothing.
    #[test]
    fn a_shortcut_decides_as_the_interpreter_would_and_charges_alike() {
        let requests = [
            json!({"resource": {"resource": "pods"}, "operation": "CREATE", "name": "a", "count": 3}),
            json!({"resource": {"resource": "placements"}, "operation": "UPDATE", "name": "b", "subResource": "status"}),
            json!({"resource": {"resource": "memberclusters"}, "operation": "DELETE", "name": "ünï"}),
        ];
        let object = json!({"spec": {"nodeName": "n1", "x": 1}});
        // (expression, what the shortcut says for each request above: None, the interpreter's)
        let cases: [(&str, [Option<bool>; 3]); 9] = [
            ("request.resource.resource != 'pods' || object.spec.x == 2", [None, Some(true), Some(true)]),
            (
                "'placements' == request.resource.resource || request.operation == 'DELETE' || request.name.startsWith('a')",
                [None, Some(true), Some(true)],
            ),
            // A long chain, balanced into a tree by the parser, decided by its fourth operand.
            (
                "request.name == 'x' || request.name == 'y' || request.name == 'z' || request.operation == 'UPDATE' || object.spec.x == 1 || object.spec.x == 2",
                [None, Some(true), None],
            ),
            (
                "request.operation == 'CREATE' && request.resource.resource == 'pods' && object.spec.nodeName == 'n1'",
                [None, Some(false), Some(false)],
            ),
            // Not a string, absent, a has() test, a function call: the interpreter's to decide.
            ("request.count == '3' || request.resource.resource == 'pods'", [None, None, None]),
            ("request.subResource != 'status' || object.spec.x == 1", [None, None, None]),
            ("has(request.subResource) || request.resource.resource == 'pods'", [None, None, None]),
            ("request.name.startsWith('a') || request.resource.resource == 'pods'", [None, None, None]),
            // A multi-byte name is charged by its characters, as the interpreter counts them.
            ("request.name != 'ünï' || object.spec.x == 2", [Some(true), Some(true), None]),
        ];
        for (source, expected) in cases {
            let program = compile(source).expect("compiles");
            for (request, want) in requests.iter().zip(expected) {
                let inputs = Inputs::new([("request", Some(request)), ("object", Some(&object))]).expect("inputs");
                let (quick, full) = (Budget::new(), Budget::new());
                let decided = Scope::new(&inputs, &quick).expect("scope").decided(&program).expect("no budget error");
                assert_eq!(decided, want, "{source} on {request}");
                let spent = |b: &Budget| b.spent.load(Ordering::Relaxed);
                match decided {
                    Some(v) => {
                        let evaluated = Scope::new(&inputs, &full).expect("scope").evaluate(&program);
                        assert_eq!(evaluated, Ok(Value::Bool(v)), "{source} on {request}");
                        assert_eq!(spent(&quick), spent(&full), "{source} on {request}: charged alike");
                    }
                    None => assert_eq!(spent(&quick), 0, "{source}: nothing charged when undecided"),
                }
            }
        }
    }

    /// `has()` answered from the JSON gives what the interpreter gives on the expression as
    /// written, value or error, charged alike; a name a comprehension binds is left as written.
    #[test]
    fn presence_answered_from_the_json_is_what_the_interpreter_says() {
        let object = json!({"metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "m"}]},
                            "spec": {"nodeName": "n", "empty": null, "list": [{"x": 1}, {"y": 2}]}});
        let cases = [
            "has(object.metadata.labels)",
            "has(object.metadata.annotations)",
            "has(object.spec.empty)",
            "!has(object.spec.nodeName) || object.spec.nodeName == 'n'",
            "has(object.spec.missing.deeper)",
            "has(object.spec.nodeName.x)",
            "has(object.spec.list.x)",
            "has(oldObject.metadata.labels)",
            "has(object.metadata)",
            "has(request.name) ? request.name : 'none'",
            "has(unbound.a)",
            "object.spec.list.all(x, has(x.x))",
            "object.spec.list.exists(object, has(object.y))",
            "[object].all(o, has(o.spec.nodeName) && has(object.metadata.name))",
            "{'k': has(object.metadata.labels)}['k'] && [has(object.spec.empty)][0]",
            "has(object.metadata.labels) && 'a' in object.metadata.labels",
        ];
        let request = json!({"name": "r"});
        for source in cases {
            let program = compile(source).expect("compiles");
            // Left as written where every has() is on a comprehension's name.
            let Some(as_written) = program.as_written.as_ref() else {
                let on_their_names =
                    ["object.spec.list.all(x, has(x.x))", "object.spec.list.exists(object, has(object.y))"];
                assert!(on_their_names.contains(&source), "{source}: a has() to answer");
                continue;
            };
            for old in [None, Some(&object)] {
                let inputs = Inputs::new([("object", Some(&object)), ("oldObject", old), ("request", Some(&request))])
                    .expect("inputs");
                let (answered, written) = (Budget::new(), Budget::new());
                let a = Scope::new(&inputs, &answered).expect("scope").evaluate(&program);
                let w = Scope::new(&inputs, &written).expect("scope").run(as_written);
                assert_eq!(a, w, "{source} with oldObject {old:?}");
                let spent = |b: &Budget| b.spent.load(Ordering::Relaxed);
                assert_eq!(spent(&answered), spent(&written), "{source}: charged alike");
            }
        }
        // The comprehension's own name is left as written; the input's is answered.
        let program = compile("[1].all(object, has(object.a)) || has(object.b)").expect("compiles");
        assert_eq!(program.present, vec![vec!["object".to_string(), "b".to_string()]]);
    }

    /// A shortcut stops at the budget where the interpreter would.
    #[test]
    fn a_shortcut_stops_at_the_budget() {
        let program = compile("request.name != 'x' || object.spec.x == 1").expect("compiles");
        let request = json!({"name": "a".repeat(100)});
        let inputs = Inputs::new([("request", Some(&request)), ("object", None)]).expect("inputs");
        let budget = Budget::new();
        budget.spent.store(COST_LIMIT - 50, Ordering::Relaxed);
        let scope = Scope::new(&inputs, &budget).expect("scope");
        assert_eq!(scope.decided(&program), Err(CelError::Budget));
        assert!(budget.exceeded());
        assert_eq!(scope.evaluate(&program), Err(CelError::Budget));
    }

    /// JSON objects behave as cel's maps in every operation: presence, `in`, indexing, size,
    /// equality either way round and against a literal, iteration, functions, and a map as
    /// the result (what a lazier conversion, tried for issue #39, has to keep).
    #[test]
    fn json_objects_behave_as_maps_whichever_way_they_are_read() {
        let object = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "managedFields": [{"fieldsV1": {"f:x": {}}}]},
                            "spec": {"nodeName": "n", "empty": {}, "nested": {"k": [1, {"z": true}]}}});
        let old = json!({"metadata": {"labels": {"b": "2", "a": "1"}}, "spec": {"nodeName": "m"}});
        let vars = [("object", object.clone()), ("oldObject", old)];
        let cases = [
            ("has(object.metadata.labels) && has(object.spec.nodeName)", Value::Bool(true)),
            ("has(object.spec.missing) || has(object.metadata.nothing)", Value::Bool(false)),
            ("'a' in object.metadata.labels && !('c' in object.metadata.labels)", Value::Bool(true)),
            ("object.metadata.labels['b'] == '2' && object.spec.nested.k[1].z", Value::Bool(true)),
            ("size(object.metadata.labels) == 2 && object.spec.empty.size() == 0", Value::Bool(true)),
            ("object.metadata.labels == oldObject.metadata.labels", Value::Bool(true)),
            ("object.metadata.labels == {'a': '1', 'b': '2'}", Value::Bool(true)),
            ("{'b': '2', 'a': '1'} == object.metadata.labels", Value::Bool(true)),
            ("{'a': '1'} == object.metadata.labels || object.spec == oldObject.spec", Value::Bool(false)),
            (
                "object.metadata.labels.all(k, k in ['a', 'b']) && object.spec.exists(k, k == 'nested')",
                Value::Bool(true),
            ),
            ("[object.metadata.labels][0]['a'] == '1' && type(object.spec) == map", Value::Bool(true)),
            ("object.metadata.labels", to_cel(&json!({"a": "1", "b": "2"}))),
        ];
        for (rule, want) in cases {
            assert_eq!(eval(rule, &vars), Ok(want), "{rule}");
        }
        // A missing key and a key of another type fail as on cel's own maps.
        assert!(
            matches!(eval("object.spec.missing == 1", &vars), Err(CelError::Evaluation(e)) if e.contains("missing"))
        );
        assert!(eval("object.spec[1] == 1", &vars).is_err());
        assert_eq!(eval("1 in object.spec", &vars), Ok(Value::Bool(false)));
    }

    #[test]
    fn evaluates_the_rules_the_upstream_crds_use() {
        let s = json!({"torch": {}, "mpi": {"n": 1}, "items": ["a", "b", "a"], "n": 3});
        let cases = [
            ("[has(self.torch), has(self.mpi), has(self.jax)].filter(x, x).size() <= 1", false),
            ("self.items.all(x, x in ['a', 'b'])", true),
            ("size(self.items.filter(i, size(self.items.filter(j, j == i)) > 1)) == 0", false),
            ("self.items.exists_one(x, x == 'b')", true),
            ("self.items.map(x, x + '!')[0] == 'a!'", true),
            ("self.n >= 1 && 'x'.matches('^[a-z]+$')", true),
            ("!has(self.jax) || self.jax.n > 0", true),
        ];
        for (rule, want) in cases {
            assert_eq!(eval(rule, &[("self", s.clone())]), Ok(Value::Bool(want)), "{rule}");
        }
    }

    #[test]
    fn malformed_expressions_are_compile_errors() {
        for bad in ["self.a ==", "((1)", "self.all(x,", "'unterminated"] {
            assert_eq!(compile(bad).map(|_| ()).map_err(|e| e.kind()), Err("compile"), "{bad}");
        }
        assert_eq!(compile(&"1 + ".repeat(3000)).map(|_| ()).map_err(|e| e.kind()), Err("too_long"));
        let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
        assert!(compile(&deep).is_err());
        let chain = vec!["1"; 1500].join(" + ");
        assert_eq!(compile(&chain).map(|_| ()).map_err(|e| e.kind()), Err("too_complex"));
    }

    #[test]
    fn nested_loops_over_large_lists_stop_at_the_budget() {
        let big = json!((0..3000).collect::<Vec<_>>());
        let started = Instant::now();
        let r = eval("self.all(x, self.all(y, self.all(z, x + y + z >= 0)))", &[("self", big.clone())]);
        assert_eq!(r, Err(CelError::Budget));
        let r = eval("self.map(x, self + self).size() > 0", &[("self", big.clone())]);
        assert_eq!(r, Err(CelError::Budget));
        let r = eval("self.all(x, x in self)", &[("self", big)]);
        assert_eq!(r, Err(CelError::Budget));
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    }

    #[test]
    fn inputs_beyond_the_limit_are_not_evaluated() {
        let huge = json!(vec![0; MAX_INPUT_VALUES + 1]);
        assert_eq!(eval("true", &[("self", huge)]), Err(CelError::InputTooLarge));
    }

    #[test]
    fn an_input_is_converted_whole_only_when_read_whole() {
        let (request, object) = (json!({"resource": "pods"}), json!({"spec": {"n": 1}}));
        let inputs = Inputs::new([("request", Some(&request)), ("object", Some(&object))]).expect("small");
        let converted = |name: &str| inputs.bound.iter().any(|i| i.name == name && i.converted.get().is_some());
        let scope = Scope::new(&inputs, &Budget::new()).expect("scope");
        let first = compile("request.resource != 'placements' || object.spec.n == 1").expect("compiles");
        assert_eq!(scope.evaluate(&first), Ok(Value::Bool(true)));
        assert!(!converted("request") && !converted("object"), "fields are read alone: {inputs:?}");
        let second = compile("object.spec.n == 1 && object.spec.n > 0").expect("compiles");
        assert_eq!(scope.evaluate(&second), Ok(Value::Bool(true)));
        assert!(!converted("object"), "a field read converts that field alone");
        let third = compile("object.size() == 1").expect("compiles");
        assert_eq!(scope.evaluate(&third), Ok(Value::Bool(true)));
        assert!(converted("object"));
        // A large field read again and again: alone while the reads have converted fewer
        // values than the input holds, then from the input converted whole.
        let object = json!({"spec": {"list": (0..50).collect::<Vec<_>>()}});
        let inputs = Inputs::new([("object", Some(&object))]).expect("small");
        let converted = || inputs.bound[0].converted.get().is_some();
        let scope = Scope::new(&inputs, &Budget::new()).expect("scope");
        let read = compile("object.spec.list.size() == 50").expect("compiles");
        assert_eq!(scope.evaluate(&read), Ok(Value::Bool(true)));
        assert!(!converted());
        assert_eq!(scope.evaluate(&read), Ok(Value::Bool(true)));
        assert!(converted(), "the second read of most of the input converts it whole");
        assert_eq!(scope.evaluate(&read), Ok(Value::Bool(true)));
    }

    /// A qualified name read as JSON fields gives what selecting it from the whole input gives,
    /// errors included, whether or not the whole was converted first.
    #[test]
    fn a_field_read_alone_reads_as_the_whole_would() {
        let big: Vec<i64> = (0..80).collect();
        let object = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"cluster": "m1", "none": null, "list": [1, 2], "big": big, "empty": {}}});
        let cases = [
            "object.spec.cluster == 'm1'",
            "object.metadata.labels.x == '1'",
            "has(object.spec.cluster)",
            "has(object.spec.missing)",
            "has(object.spec.none)",
            "object.spec.none == null",
            "object.spec.list.size() == 2 && object.spec.list[1] == 2",
            "object.spec.big.size()",
            "object.spec.big.exists(x, x == 70)",
            "object.spec.empty.size() == 0",
            "object.spec.missing == 1",
            "object.spec.none.deeper == 1",
            "object.spec.cluster.deeper == 1",
            "has(object.spec.cluster.deeper)",
            "object.spec.list.x == 1",
            "object.spec.all(k, k != '')",
            "[object].all(object, object.spec.cluster == 'm1')",
        ];
        for source in cases {
            let program = compile(source).expect("compiles");
            let inputs = Inputs::new([("object", Some(&object))]).expect("small");
            let alone = Scope::new(&inputs, &Budget::new()).expect("scope").evaluate(&program);
            let inputs = Inputs::new([("object", Some(&object))]).expect("small");
            let scope = Scope::new(&inputs, &Budget::new()).expect("scope");
            scope.evaluate(&compile("object.size() > 0").expect("compiles")).expect("evaluates");
            let from_whole = scope.evaluate(&program);
            assert_eq!(alone.map_err(|e| e.kind()), from_whole.map_err(|e| e.kind()), "{source}");
        }
    }

    /// `matches` with its patterns kept answers as the standard library's, errors included.
    #[test]
    fn matches_answers_as_the_standard_library_does() {
        let cases = [
            "'abc'.matches('^a.c$')",
            "'abc'.matches('^b')",
            "'abc'.matches('b')",
            "'abc'.matches('(')",
            "1.matches('1')",
            "'1'.matches(1)",
            "self.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "self.name.matches('^[A-Z]')",
            "self.missing.matches('x')",
            "matches('abc', 'b')",
            "['ab', 'cd'].all(x, x.matches('^[a-d]+$'))",
            "'abc'.matches(self.name)",
            "'ab'.matches('a' + 'b')",
        ];
        let program = compile("'a'.matches('a')").expect("compiles");
        assert!(format!("{:?}", program.expr).contains(MATCHES), "evaluated by the function that keeps patterns");
        let computed = compile("'a'.matches(self.p)").expect("compiles");
        assert!(!format!("{:?}", computed.expr).contains(MATCHES), "a pattern from the input is not kept");
        let object = json!({"name": "burst-0001"});
        for source in cases {
            let ours = eval(source, &[("self", object.clone())]);
            let mut context = Context::default();
            context.add_variable_from_value("self", to_cel(&object));
            let standard = cel::Program::compile(source).expect("parses").execute(&context);
            match (ours, standard) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{source}"),
                (Err(CelError::Evaluation(a)), Err(b)) => assert_eq!(a, b.to_string(), "{source}"),
                (a, b) => panic!("{source}: {a:?} against {b:?}"),
            }
        }
    }

    #[test]
    fn runtime_errors_are_errors() {
        assert_eq!(eval("self.missing == 1", &[("self", json!({}))]).map_err(|e| e.kind()), Err("evaluation"));
        assert_eq!(eval("1 / 0 == 1", &[]).map_err(|e| e.kind()), Err("evaluation"));
    }

    #[test]
    fn the_deepest_accepted_expression_evaluates_on_a_small_stack() {
        let deep = format!("{}true{}", "!(".repeat(20), ")".repeat(20));
        let p = compile(&deep).expect("compiles");
        let r = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || Scope::new(&Inputs::new([])?, &Budget::new())?.evaluate(&p))
            .expect("thread")
            .join()
            .expect("no overflow");
        assert_eq!(r, Ok(Value::Bool(true)));
    }
}
