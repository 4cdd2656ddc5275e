//! Expressions decided without the interpreter. A ValidatingAdmissionPolicy's validations
//! mostly begin by asking which resource or operation a request is for
//! (`request.resource.resource != 'placements' || ...`), and for a write of any other kind that
//! first comparison is the whole answer. The interpreter got there too, but through its
//! context, its function table and a boxed value per name it resolved: the status-writers
//! policy, eight such validations, was a third of the hub's work per TrainJob (issue #39).
//!
//! What is decided here is exactly what the interpreter would decide, and charged as it would
//! be: the interpreter evaluates `a || b` left to right and stops at the first operand that is
//! `true` (for `&&`, `false`), so when the chain's leading operands are comparisons of an
//! input's string field with a string literal, and one of them decides the chain, it would have
//! evaluated those comparisons and nothing else. Anything else (a field that is absent or not a
//! string, an operand of another form before the deciding one) is left to the interpreter,
//! with nothing charged.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

/// The leading comparisons of an expression's top-level `||` (or `&&`) chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shortcut {
    /// What the chain is once one operand is it: `true` for `||`, `false` for `&&`.
    decides: bool,
    /// The chain's first operands, in the order they are evaluated, as long as each is a
    /// [`Guard`].
    guards: Vec<Guard>,
}

/// `input.a.b == 'literal'` or `!=`, either way round.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Guard {
    input: String,
    path: Vec<String>,
    literal: String,
    equal: bool,
    /// Whether the field is the left operand: the interpreter charges the left one first.
    field_first: bool,
}

/// Where a [`Shortcut`] reads its fields: a bound input's string at a path of object fields.
pub(super) trait Fields {
    fn string_at(&self, input: &str, path: &[String]) -> Option<&str>;
    /// What `has()` says of the path's last field on the object its first names lead to
    /// (`super::PRESENT`); `None` when they lead to no object.
    fn present(&self, path: &[String]) -> Option<bool>;
}

impl Shortcut {
    /// The shortcut of an expression as parsed (before the budget's instrumentation), if it has
    /// one.
    pub(super) fn of(e: &IdedExpr) -> Option<Shortcut> {
        let (op, decides) = match &e.expr {
            Expr::Call(c) if c.target.is_none() && c.func_name == operators::LOGICAL_OR => {
                (operators::LOGICAL_OR, true)
            }
            Expr::Call(c) if c.target.is_none() && c.func_name == operators::LOGICAL_AND => {
                (operators::LOGICAL_AND, false)
            }
            _ => return None,
        };
        let mut operands = Vec::new();
        flatten(e, op, &mut operands);
        let guards: Vec<Guard> = operands.into_iter().map_while(guard).collect();
        (!guards.is_empty()).then_some(Shortcut { decides, guards })
    }

    /// The expression's value when one of its guards decides it, every guard before that one
    /// having read a string and not decided, and the budget units the interpreter would charge
    /// for them, in its order (each operand of a comparison: one, plus its length in
    /// characters). `None`: the interpreter has to decide.
    pub(super) fn decide(&self, fields: &dyn Fields) -> Option<(bool, Vec<u64>)> {
        let mut charges = Vec::new();
        for g in &self.guards {
            let value = fields.string_at(&g.input, &g.path)?;
            let cost = |s: &str| 1 + s.chars().count() as u64;
            let (first, second) = if g.field_first { (value, g.literal.as_str()) } else { (g.literal.as_str(), value) };
            charges.extend([cost(first), cost(second)]);
            let holds = (value == g.literal) == g.equal;
            if holds == self.decides {
                return Some((self.decides, charges));
            }
        }
        None
    }
}

/// The operands of a chain of `op`, in the order they are evaluated: the parser balances a long
/// chain into a tree, whose leaves in order are that.
fn flatten<'e>(e: &'e IdedExpr, op: &str, out: &mut Vec<&'e IdedExpr>) {
    match &e.expr {
        Expr::Call(c) if c.target.is_none() && c.func_name == op && c.args.len() == 2 => {
            flatten(&c.args[0], op, out);
            flatten(&c.args[1], op, out);
        }
        _ => out.push(e),
    }
}

fn guard(e: &IdedExpr) -> Option<Guard> {
    let Expr::Call(c) = &e.expr else { return None };
    let equal = match c.func_name.as_str() {
        operators::EQUALS => true,
        operators::NOT_EQUALS => false,
        _ => return None,
    };
    let [a, b] = c.args.as_slice() else { return None };
    if c.target.is_some() {
        return None;
    }
    let (field, literal, field_first) = match (field_of(a), literal_of(b)) {
        (Some(f), Some(l)) => (f, l, true),
        _ => (field_of(b)?, literal_of(a)?, false),
    };
    let (input, path) = field.split_first()?;
    (!path.is_empty()).then(|| Guard { input: input.clone(), path: path.to_vec(), literal, equal, field_first })
}

/// `input.a.b` as `[input, a, b]`: selections (not `has()` tests) down to an identifier.
pub(super) fn field_of(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(name) => Some(vec![name.clone()]),
        Expr::Select(s) if !s.test => {
            let mut path = field_of(&s.operand)?;
            path.push(s.field.clone());
            Some(path)
        }
        _ => None,
    }
}

fn literal_of(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
        _ => None,
    }
}
