//! CEL expressions of the configuration, compiled once at load: claim rules and mappings see
//! `claims` (the token's payload), user rules see `user` (`username`, `uid`, `groups`,
//! `extra`), authorization match conditions see `request` (a SubjectAccessReview's `spec`).
//!
//! Two bounds, as kube-apiserver's estimated and runtime cost limits:
//! - at load, a worst-case cost estimated from the expression's shape, any value read from the
//!   input as large as the payload of the largest token accepted ([`MAX_INPUT_BYTES`]), in
//!   kube-apiserver's units with size-aware string costs (see `cost`); one above [`COST_LIMIT`]
//!   is a configuration error;
//! - at run time, a budget of [`EVAL_BUDGET`] bytes built or copied per evaluation, charged
//!   before each value is built (see `budget`); an evaluation that spends it fails.

use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, Program, Value};

mod budget;
mod cost;

/// The largest estimated cost of one expression (kube-apiserver's per-call limit).
pub const COST_LIMIT: u64 = 1_000_000;
/// The most bytes one evaluation may build or copy: 128 times the largest token.
pub const EVAL_BUDGET: u64 = 4 << 20;
/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION: usize = 10 * 1024;
/// The most bytes of a string (or of all strings) in a token, as the cost estimate assumes: the
/// payload of the largest token accepted (`jwt::MAX_TOKEN`), three quarters of it in base64url.
pub const MAX_INPUT_BYTES: u64 = (crate::jwt::MAX_TOKEN as u64) / 4 * 3;
/// The most items a list in a token may hold, as the cost estimate assumes: each spends at
/// least two bytes of the payload.
pub const MAX_LIST_ITEMS: u64 = MAX_INPUT_BYTES / 2;

/// Which variable an expression sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `claims`: claim validation rules and claim mappings.
    Claims,
    /// `user`: user validation rules.
    User,
    /// `request`: the `spec` of a SubjectAccessReview (`request.user`, `request.groups`,
    /// `request.resourceAttributes.namespace`, …): authorization webhooks' match conditions.
    Request,
}

impl Scope {
    fn variable(self) -> &'static str {
        match self {
            Scope::Claims => "claims",
            Scope::User => "user",
            Scope::Request => "request",
        }
    }
}

/// Why an expression does not compile (the text names the cause; the caller adds the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// Empty or only spaces. Not retryable: the configuration must change.
    #[error("expression is required")]
    Empty,
    /// Longer than [`MAX_EXPRESSION`]. Not retryable.
    #[error("expression is {0} bytes, more than the limit of {MAX_EXPRESSION}")]
    TooLong(usize),
    /// Not CEL. Not retryable.
    #[error("compilation failed: {0}")]
    Syntax(String),
    /// Names a variable other than the scope's. Not retryable.
    #[error("compilation failed: undeclared reference to '{name}' (only '{allowed}' is declared)")]
    Undeclared {
        /// The name used.
        name: String,
        /// The scope's variable.
        allowed: &'static str,
    },
    /// Its worst case costs more than [`COST_LIMIT`]: it may build values far larger than the
    /// token, or run comprehensions nested over token lists. Not retryable.
    #[error(
        "estimated cost {cost} exceeds the limit of {COST_LIMIT} (worst case on a payload of \
         {MAX_INPUT_BYTES} bytes: values of up to {largest} bytes, {iterations} loop iterations)"
    )]
    TooCostly {
        /// The estimate.
        cost: u64,
        /// The most bytes of a value it may read or build.
        largest: u64,
        /// How many times its loop bodies may run.
        iterations: u64,
    },
}

/// Why an expression failed on a token or user, its runtime budget spent included (the text is
/// for the log, never the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

/// One compiled expression.
#[derive(Debug)]
pub struct Expression {
    program: Program,
    /// What runs: the program with its budget's charges (`budget::meter`).
    metered: IdedExpr,
    source: String,
    scope: Scope,
    cost: u64,
}

/// The environment: the standard library with the `strings` and `lists` extensions, and the
/// budget's charging functions.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Both extensions are part of the crate, and the budget's names cannot be written in
        // CEL: adding them cannot conflict with stdlib.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let _ = budget::register(&mut env);
        Arc::new(env)
    })
    .clone()
}

impl Expression {
    /// Compiles `source` for `scope`.
    pub fn compile(source: &str, scope: Scope) -> Result<Expression, CompileError> {
        if source.trim().is_empty() {
            return Err(CompileError::Empty);
        }
        if source.len() > MAX_EXPRESSION {
            return Err(CompileError::TooLong(source.len()));
        }
        let program = env()
            .compile(source)
            .map_err(|e| CompileError::Syntax(e.to_string().trim().to_string()))?;
        let allowed = scope.variable();
        let mut bound = Vec::new();
        free_variable(&program.expression().expr, allowed, &mut bound)?;
        let estimate = cost::estimate(program.expression());
        if estimate.cost > COST_LIMIT {
            return Err(CompileError::TooCostly {
                cost: estimate.cost,
                largest: estimate.largest,
                iterations: estimate.iterations,
            });
        }
        Ok(Expression {
            metered: budget::meter(program.expression()),
            program,
            source: source.to_string(),
            scope,
            cost: estimate.cost,
        })
    }

    /// The text it was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The estimated worst-case cost.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether it reads `claims.<field>` (or `has(claims.<field>)`, `claims[?"<field>"]`).
    pub fn reads_claim(&self, field: &str) -> bool {
        self.scope == Scope::Claims && selects(&self.program.expression().expr, "claims", field)
    }

    /// Evaluates it with the scope's variable set to `value`, within [`EVAL_BUDGET`].
    pub fn eval(&self, value: &Value) -> Result<Value, EvalError> {
        let mut context = Context::with_env(env());
        context.add_variable_from_value(self.scope.variable(), value.clone());
        let (result, spent) =
            budget::within(EVAL_BUDGET, || Value::resolve(&self.metered, &context));
        if spent {
            // Whatever it returned: an error may have been absorbed (`exists` over an error
            // and a true).
            return Err(EvalError(format!(
                "evaluation exceeded its budget of {EVAL_BUDGET} bytes built or copied"
            )));
        }
        result.map_err(|e| EvalError(e.to_string()))
    }

    /// Evaluates it as [`Expression::eval`] does, a result other than a bool being an error.
    pub fn eval_bool(&self, value: &Value) -> Result<bool, EvalError> {
        match self.eval(value)? {
            Value::Bool(b) => Ok(b),
            other => Err(EvalError(format!(
                "must evaluate to bool but got {}",
                other.type_of()
            ))),
        }
    }

    /// The type of its result when its shape alone decides it (`"bool"` for a comparison,
    /// `"string"` for a string literal, `"int"` for `size(…)`, `"list"` for `.map(…)`), `None`
    /// when it depends on the variable (`request.user`). The crate has no type checker: this
    /// catches at load what a checker would refuse at the top of an expression, not everything.
    pub fn known_type(&self) -> Option<&'static str> {
        known_type(&self.program.expression().expr)
    }
}

/// The result type of `expr` when its shape decides it (see [`Expression::known_type`]).
fn known_type(expr: &Expr) -> Option<&'static str> {
    use cel::common::ast::LiteralValue as L;
    match expr {
        Expr::Literal(literal) => Some(match literal {
            L::Boolean(_) => "bool",
            L::Bytes(_) => "bytes",
            L::Double(_) => "double",
            L::Int(_) => "int",
            L::Null => "null_type",
            L::String(_) => "string",
            L::UInt(_) => "uint",
        }),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        Expr::Call(c) => match c.func_name.as_str() {
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" | "@in"
            | "has" | "startsWith" | "endsWith" | "contains" | "matches" => Some("bool"),
            "size" | "int" => Some("int"),
            "string" => Some("string"),
            "double" => Some("double"),
            "uint" => Some("uint"),
            "bytes" => Some("bytes"),
            "type" => Some("type"),
            "_?_:_" => match c.args.as_slice() {
                [_, yes, no] => known_type(&yes.expr).filter(|t| known_type(&no.expr) == Some(t)),
                _ => None,
            },
            _ => None,
        },
        // `all`, `exists` start from a bool, `map` and `filter` from a list, and return it.
        Expr::Comprehension(c) => match &c.result.expr {
            Expr::Ident(name) if *name == c.accu_var => known_type(&c.accu_init.expr),
            result => known_type(result),
        },
        Expr::Ident(_) | Expr::Select(_) | Expr::Struct(_) | Expr::Unspecified => None,
    }
}

/// `serde_json` to CEL (objects become maps with string keys).
pub fn to_cel(value: &serde_json::Value) -> Value {
    cel::to_value(value).unwrap_or(Value::Null)
}

/// Refuses identifiers that are neither the scope's variable nor bound by a comprehension.
fn free_variable(
    expr: &Expr,
    allowed: &'static str,
    bound: &mut Vec<String>,
) -> Result<(), CompileError> {
    let check = |e: &IdedExpr, bound: &mut Vec<String>| free_variable(&e.expr, allowed, bound);
    match expr {
        Expr::Ident(name) => {
            if name == allowed || bound.iter().any(|b| b == name) || is_type_name(name) {
                Ok(())
            } else {
                Err(CompileError::Undeclared {
                    name: name.clone(),
                    allowed,
                })
            }
        }
        Expr::Select(s) => check(&s.operand, bound),
        Expr::Call(c) => {
            if let Some(target) = &c.target {
                check(target, bound)?;
            }
            c.args.iter().try_for_each(|a| check(a, bound))
        }
        Expr::List(l) => l.elements.iter().try_for_each(|e| check(e, bound)),
        Expr::Map(m) => m.entries.iter().try_for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => {
                check(&entry.key, bound)?;
                check(&entry.value, bound)
            }
            EntryExpr::StructField(field) => check(&field.value, bound),
        }),
        Expr::Struct(s) => s.entries.iter().try_for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => check(&entry.value, bound),
            EntryExpr::StructField(field) => check(&field.value, bound),
        }),
        Expr::Comprehension(c) => {
            check(&c.iter_range, bound)?;
            check(&c.accu_init, bound)?;
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            let inner = check(&c.loop_cond, bound)
                .and_then(|()| check(&c.loop_step, bound))
                .and_then(|()| check(&c.result, bound));
            bound.truncate(depth);
            inner
        }
        Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

/// Type names usable as values (`type(x) == string`).
fn is_type_name(name: &str) -> bool {
    matches!(
        name,
        "bool"
            | "int"
            | "uint"
            | "double"
            | "string"
            | "bytes"
            | "list"
            | "map"
            | "null_type"
            | "type"
    )
}

/// Whether `expr` selects `operand.field` anywhere (upstream's `hasSelectExp`).
fn selects(expr: &Expr, operand: &str, field: &str) -> bool {
    let is_operand = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == operand);
    match expr {
        Expr::Select(s) => {
            (is_operand(&s.operand) && s.field == field) || selects(&s.operand.expr, operand, field)
        }
        Expr::Call(c) => {
            let optional_select = c.target.is_none()
                && c.func_name == "_?._"
                && c.args.len() == 2
                && is_operand(&c.args[0])
                && matches!(&c.args[1].expr, Expr::Literal(cel::common::ast::LiteralValue::String(s)) if s.inner() == field);
            optional_select
                || c.args.iter().any(|a| selects(&a.expr, operand, field))
                || c.target
                    .as_deref()
                    .is_some_and(|t| selects(&t.expr, operand, field))
        }
        Expr::List(l) => l.elements.iter().any(|e| selects(&e.expr, operand, field)),
        Expr::Map(m) => m.entries.iter().any(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => {
                selects(&entry.key.expr, operand, field)
                    || selects(&entry.value.expr, operand, field)
            }
            EntryExpr::StructField(f) => selects(&f.value.expr, operand, field),
        }),
        Expr::Struct(s) => s.entries.iter().any(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => selects(&entry.value.expr, operand, field),
            EntryExpr::StructField(f) => selects(&f.value.expr, operand, field),
        }),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .iter()
        .any(|e| selects(&e.expr, operand, field)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => false,
    }
}

#[cfg(test)]
mod tests;
