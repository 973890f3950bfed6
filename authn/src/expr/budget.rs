//! The runtime budget: every evaluation may build or copy at most [`EVAL_BUDGET`] bytes. The
//! `cel` crate has no cost tracker and no hook in its interpreter, so the expression it runs is
//! rewritten at load ([`meter`]): whatever builds or copies a value is handed its operands through
//! a function that charges them first, and `replace` and `join`, whose results may be far larger
//! than their operands, are computed here after their exact size is charged. A value counts
//! [`VALUE_BYTES`] and the bytes of its strings and items, so a list of many small items counts
//! what it really holds. The charges:
//! - the operands of `+`, the items of list and map literals (a `map` or `filter` result too),
//!   the range of a comprehension (each item is copied into its variable) and its initial
//!   accumulator, the target and arguments of every function that builds a value;
//! - `split`: every piece it may cut; `format`: [`FORMAT_CLAUSE_BYTES`] per clause;
//! - `replace`, `join`: the exact result, computed before it is built.
//!
//! A charge over what is left fails the call, and the evaluation fails whatever it returns.

use std::cell::Cell;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue,
};
use cel::common::types::{
    CelBytes, CelInt, CelList, CelMap, CelOptional, CelString, Kind, Type, DYN_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::EVAL_BUDGET;

/// What every value counts besides its bytes: its place in a list or map and its allocation.
const VALUE_BYTES: u64 = 16;
/// What one `format` clause may write (a `%f` of 1e308 at the largest precision, 100).
pub(super) const FORMAT_CLAUSE_BYTES: u64 = 512;

/// Charges its argument's size and hands it back.
const SIZE: &str = "@apiagg_size";
/// Charges the largest list `split` may cut from its string argument and hands it back.
const SPLIT: &str = "@apiagg_split_size";
/// Charges what `format` may write for its format string and hands it back.
const FORMAT: &str = "@apiagg_format_size";
/// `replace`, its result charged first.
const REPLACE: &str = "@apiagg_replace";
/// `join`, its result charged first.
const JOIN: &str = "@apiagg_join";

/// Functions and operators that build nothing larger than a few bytes (or borrow their
/// operand): their operands are not charged.
const READERS: &[&str] = &[
    "_&&_",
    "_||_",
    "!_",
    "_?_:_",
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "@in",
    "_[_]",
    "_[?_]",
    "_?._",
    "@not_strictly_false",
    "-_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "indexOf",
    "lastIndexOf",
    "charAt",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "hasValue",
];

/// Declares the charging functions (their names cannot be written in CEL).
pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(SIZE, SIZE, dyn_args(1), charge_size)?;
    env.add_overload(SPLIT, SPLIT, dyn_args(1), charge_split)?;
    env.add_overload(FORMAT, FORMAT, dyn_args(1), charge_format)?;
    for arity in [3, 4] {
        let id = format!("{REPLACE}/{arity}");
        env.add_overload(REPLACE, &id, dyn_args(arity), replace)?;
    }
    for arity in [1, 2] {
        let id = format!("{JOIN}/{arity}");
        env.add_overload(JOIN, &id, dyn_args(arity), join)?;
    }
    Ok(())
}

fn dyn_args(n: usize) -> Vec<Type> {
    (0..n).map(|_| DYN_TYPE).collect()
}

/// The budget of the evaluation running on this thread.
#[derive(Clone, Copy)]
struct State {
    /// Bytes left (`None`: no evaluation is running).
    left: Option<u64>,
    /// A charge failed.
    spent: bool,
}

thread_local! {
    static STATE: Cell<State> = const { Cell::new(State { left: None, spent: false }) };
}

/// Runs `f` with a budget of `limit` bytes; also says whether a charge failed.
pub(super) fn within<T>(limit: u64, f: impl FnOnce() -> T) -> (T, bool) {
    /// Puts the previous state back, even when `f` unwinds.
    struct Restore(State);
    impl Drop for Restore {
        fn drop(&mut self) {
            STATE.with(|s| s.set(self.0));
        }
    }
    let fresh = State {
        left: Some(limit),
        spent: false,
    };
    let restore = Restore(STATE.with(|s| s.replace(fresh)));
    let out = f();
    let spent = STATE.with(|s| s.get().spent);
    drop(restore);
    (out, spent)
}

/// Charges `bytes(left)` (which may stop counting past `left`) to the running evaluation.
fn charge(bytes: impl FnOnce(u64) -> u64) -> Result<(), ExecutionError> {
    STATE.with(|s| {
        let mut state = s.get();
        let Some(left) = state.left else {
            return Ok(());
        };
        let needed = bytes(left);
        if needed <= left {
            state.left = Some(left - needed);
            s.set(state);
            return Ok(());
        }
        state.left = Some(0);
        state.spent = true;
        s.set(state);
        Err(ExecutionError::function_error(
            "budget",
            format!("the evaluation's budget of {EVAL_BUDGET} bytes is spent"),
        ))
    })
}

/// What `value` counts against the budget; counting stops once past `cap`.
fn footprint(value: &dyn Val, cap: u64) -> u64 {
    let mut total = VALUE_BYTES;
    let add = |item: &dyn Val, total: &mut u64| {
        *total = total.saturating_add(footprint(item, cap.saturating_sub(*total)));
        *total <= cap
    };
    if let Some(s) = value.downcast_ref::<CelString>() {
        total.saturating_add(s.inner().len() as u64)
    } else if let Some(b) = value.downcast_ref::<CelBytes>() {
        total.saturating_add(b.inner().len() as u64)
    } else if let Some(list) = value.downcast_ref::<CelList>() {
        for item in list.inner() {
            if !add(item.as_ref(), &mut total) {
                break;
            }
        }
        total
    } else if let Some(map) = value.downcast_ref::<CelMap>() {
        for (key, item) in map.inner() {
            if !add(key.inner(), &mut total) || !add(item.as_ref(), &mut total) {
                break;
            }
        }
        total
    } else if let Some(optional) = value.downcast_ref::<CelOptional>() {
        if let Some(inner) = optional.inner() {
            add(inner, &mut total);
        }
        total
    } else if let Some(iterable) = value.as_iterable() {
        let mut items = iterable.iter();
        while let Some(item) = items.next() {
            if !add(item, &mut total) {
                break;
            }
        }
        total
    } else {
        total
    }
}

fn one<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let count = args.len();
    args.into_iter()
        .next()
        .filter(|_| count == 1)
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, count))
}

fn charge_size<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = one(args)?;
    charge(|cap| footprint(value.as_ref(), cap))?;
    Ok(value)
}

fn charge_split<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = one(args)?;
    // A piece per code point at most, and one more.
    charge(|cap| match value.downcast_ref::<CelString>() {
        Some(s) => {
            let len = s.inner().len() as u64;
            len.saturating_add(VALUE_BYTES.saturating_mul(len.saturating_add(2)))
        }
        None => footprint(value.as_ref(), cap),
    })?;
    Ok(value)
}

fn charge_format<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = one(args)?;
    charge(|cap| match value.downcast_ref::<CelString>() {
        Some(s) => {
            let clauses = s.inner().matches('%').count() as u64;
            footprint(value.as_ref(), cap)
                .saturating_add(clauses.saturating_mul(FORMAT_CLAUSE_BYTES))
        }
        None => footprint(value.as_ref(), cap),
    })?;
    Ok(value)
}

/// The error of a member function called with operands of other types (as the interpreter's).
fn no_overload(function: &str, args: &[CowVal<'_, '_>]) -> ExecutionError {
    let types = args
        .iter()
        .map(|a| a.get_type().name().to_owned())
        .collect();
    ExecutionError::no_such_member_overload(function, types)
}

/// `this.replace(from, to[, n])` (the strings extension's), its result charged first.
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let string = |i: usize| args.get(i).and_then(|a| a.downcast_ref::<CelString>());
    let (Some(this), Some(from), Some(to)) = (string(0), string(1), string(2)) else {
        return Err(no_overload("replace", &args));
    };
    // A negative count replaces all.
    let limit = match args.get(3) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => return Err(no_overload("replace", &args)),
        },
    };
    let (this, from, to) = (this.inner(), from.inner(), to.inner());
    let found = if from.is_empty() {
        this.chars().count() + 1
    } else {
        this.matches(from).count()
    };
    let replaced = limit.map_or(found, |n| n.min(found)) as u64;
    charge(|_| {
        let kept = (this.len() as u64).saturating_sub(replaced.saturating_mul(from.len() as u64));
        VALUE_BYTES
            .saturating_add(kept)
            .saturating_add(replaced.saturating_mul(to.len() as u64))
    })?;
    let out = match limit {
        Some(n) => this.replacen(from, to, n),
        None => this.replace(from, to),
    };
    Ok(CowVal::owned(CelString::from(out)))
}

/// `list.join([separator])` (the strings extension's), its result charged first.
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let separator = match args.get(1) {
        None => "",
        Some(s) => match s.downcast_ref::<CelString>() {
            Some(s) => s.inner(),
            None => return Err(no_overload("join", &args)),
        },
    };
    let iterable = match args[0].as_iterable() {
        Some(list) if args[0].get_type().kind() == Kind::List => list,
        _ => return Err(no_overload("join", &args)),
    };
    let mut parts = Vec::new();
    let mut items = iterable.iter();
    while let Some(item) = items.next() {
        let part =
            item.downcast_ref::<CelString>()
                .ok_or_else(|| ExecutionError::UnexpectedType {
                    got: item.get_type().name().to_owned(),
                    want: "string".to_owned(),
                })?;
        parts.push(part.inner());
    }
    charge(|_| {
        let bytes: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let separators = (parts.len() as u64).saturating_sub(1);
        VALUE_BYTES
            .saturating_add(bytes)
            .saturating_add(separators.saturating_mul(separator.len() as u64))
    })?;
    Ok(CowVal::owned(CelString::from(parts.join(separator))))
}

/// `e` with every operation that builds or copies a value charged first (see the module doc).
pub(super) fn meter(e: &IdedExpr) -> IdedExpr {
    Meter::default().expr(e)
}

#[derive(Default)]
struct Meter {
    /// The accumulators of the comprehensions around: their steps append in place and are left
    /// as the interpreter recognizes them.
    accumulators: Vec<String>,
}

/// `function(e)`.
fn wrap(function: &str, e: IdedExpr) -> IdedExpr {
    IdedExpr {
        id: e.id,
        expr: Expr::Call(CallExpr {
            func_name: function.to_owned(),
            target: None,
            args: vec![e],
        }),
    }
}

impl Meter {
    fn expr(&mut self, e: &IdedExpr) -> IdedExpr {
        let expr = match &e.expr {
            Expr::Call(c) => self.call(c),
            Expr::List(l) => Expr::List(ListExpr {
                elements: l.elements.iter().map(|e| self.charged(e)).collect(),
                optional_indices: l.optional_indices.clone(),
            }),
            Expr::Map(m) => {
                let mut m = m.clone();
                for entry in &mut m.entries {
                    if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                        entry.key = self.charged(&entry.key);
                        entry.value = self.charged(&entry.value);
                    }
                }
                Expr::Map(m)
            }
            Expr::Select(s) => {
                let mut s = s.clone();
                *s.operand = self.expr(&s.operand);
                Expr::Select(s)
            }
            Expr::Comprehension(c) => Expr::Comprehension(Box::new(self.comprehension(c))),
            Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {
                e.expr.clone()
            }
        };
        IdedExpr { id: e.id, expr }
    }

    /// `e`, rewritten, its value charged (a scalar literal's is not: it is a few bytes).
    fn charged(&mut self, e: &IdedExpr) -> IdedExpr {
        let inner = self.expr(e);
        match &inner.expr {
            Expr::Literal(l) if !matches!(l, LiteralValue::String(_) | LiteralValue::Bytes(_)) => {
                inner
            }
            _ => wrap(SIZE, inner),
        }
    }

    /// Whether `e` is the accumulator of a comprehension around.
    fn is_accumulator(&self, e: Option<&IdedExpr>) -> bool {
        matches!(e.map(|e| &e.expr), Some(Expr::Ident(n)) if self.accumulators.contains(n))
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> ComprehensionExpr {
        let accu_init = match &c.accu_init.expr {
            Expr::List(l) if l.elements.is_empty() => c.accu_init.clone(),
            _ => self.charged(&c.accu_init),
        };
        let iter_range = self.charged(&c.iter_range);
        self.accumulators.push(c.accu_var.clone());
        let loop_cond = self.expr(&c.loop_cond);
        let loop_step = self.expr(&c.loop_step);
        self.accumulators.pop();
        let result = self.expr(&c.result);
        ComprehensionExpr {
            iter_range,
            iter_var: c.iter_var.clone(),
            iter_var2: c.iter_var2.clone(),
            accu_var: c.accu_var.clone(),
            accu_init,
            loop_cond,
            loop_step,
            result,
        }
    }

    fn call(&mut self, c: &CallExpr) -> Expr {
        let name = c.func_name.as_str();
        let member = c.target.is_some();
        let global = |func_name: &str, this: &mut Meter| {
            let args = c.target.as_deref().into_iter().chain(&c.args);
            Expr::Call(CallExpr {
                func_name: func_name.to_owned(),
                target: None,
                args: args.map(|a| this.expr(a)).collect(),
            })
        };
        match name {
            "replace" if member && matches!(c.args.len(), 2 | 3) => global(REPLACE, self),
            "join" if member && c.args.len() <= 1 => global(JOIN, self),
            _ => {
                // A map's or filter's append (`@result + [x]`) is left in the shape the
                // interpreter appends in place; its item is charged by its list.
                let appends = name == "_+_" && self.is_accumulator(c.args.first());
                let reads = READERS.contains(&name) || appends;
                let target_charge = match name {
                    "split" if member => Some(SPLIT),
                    "format" if member => Some(FORMAT),
                    _ if reads => None,
                    _ => Some(SIZE),
                };
                let target = c.target.as_deref().map(|t| {
                    Box::new(match target_charge {
                        Some(SIZE) => self.charged(t),
                        Some(f) => wrap(f, self.expr(t)),
                        None => self.expr(t),
                    })
                });
                let args = c
                    .args
                    .iter()
                    .map(|a| match name {
                        // What `split` builds is charged on its target alone.
                        "split" if member => self.expr(a),
                        _ if reads => self.expr(a),
                        _ => self.charged(a),
                    })
                    .collect();
                Expr::Call(CallExpr {
                    func_name: c.func_name.clone(),
                    target,
                    args,
                })
            }
        }
    }
}
