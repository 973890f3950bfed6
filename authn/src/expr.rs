//! CEL expressions of the configuration, compiled once at load: claim rules and mappings see
//! `claims` (the token's payload), user rules see `user` (`username`, `uid`, `groups`,
//! `extra`), authorization match conditions see `request` (a SubjectAccessReview's `spec`). A
//! compiled expression has a worst-case cost, estimated at load from its shape and
//! the largest token accepted; one above [`COST_LIMIT`] is a configuration error, as
//! kube-apiserver refuses an expression over its per-call cost limit.

use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, Program, Value};

/// The largest estimated cost of one expression (kube-apiserver's per-call limit).
pub const COST_LIMIT: u64 = 1_000_000;
/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION: usize = 10 * 1024;
/// The most items a list in a token may hold, as the cost estimate assumes: the largest
/// token accepted (`jwt::MAX_TOKEN`) spends at least two bytes per item.
pub const MAX_LIST_ITEMS: u64 = (crate::jwt::MAX_TOKEN as u64) / 2;

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
    /// Its worst case costs more than [`COST_LIMIT`]. Not retryable.
    #[error("estimated cost {cost} exceeds the limit of {COST_LIMIT} (nested comprehensions over token lists)")]
    TooCostly {
        /// The estimate.
        cost: u64,
    },
}

/// Why an expression failed on a token or user (the text is for the log, never the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

/// One compiled expression.
#[derive(Debug)]
pub struct Expression {
    program: Program,
    source: String,
    scope: Scope,
    cost: u64,
}

/// The environment: the standard library with the `strings` and `lists` extensions.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Both extensions are part of the crate; adding them cannot conflict with stdlib.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
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
        let cost = cost(program.expression());
        if cost > COST_LIMIT {
            return Err(CompileError::TooCostly { cost });
        }
        Ok(Expression {
            program,
            source: source.to_string(),
            scope,
            cost,
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

    /// Evaluates it with the scope's variable set to `value`.
    pub fn eval(&self, value: &Value) -> Result<Value, EvalError> {
        let mut context = Context::with_env(env());
        context.add_variable_from_value(self.scope.variable(), value.clone());
        self.program
            .execute(&context)
            .map_err(|e| EvalError(e.to_string()))
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

/// The worst-case number of steps: a comprehension runs its body once per item of the largest
/// list a token can carry.
fn cost(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 1,
        Expr::Select(s) => 1 + cost(&s.operand),
        Expr::Call(c) => {
            let target = c.target.as_deref().map_or(0, cost);
            c.args
                .iter()
                .map(cost)
                .fold(1 + target, u64::saturating_add)
        }
        Expr::List(l) => l.elements.iter().map(cost).fold(1, u64::saturating_add),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(entry_cost)
            .fold(1, u64::saturating_add),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(entry_cost)
            .fold(1, u64::saturating_add),
        Expr::Comprehension(c) => {
            let body = cost(&c.loop_cond).saturating_add(cost(&c.loop_step));
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(MAX_LIST_ITEMS.saturating_mul(body))
                .saturating_add(cost(&c.result))
        }
    }
}

fn entry_cost(e: &cel::common::ast::IdedEntryExpr) -> u64 {
    match &e.expr {
        EntryExpr::MapEntry(entry) => cost(&entry.key).saturating_add(cost(&entry.value)),
        EntryExpr::StructField(field) => cost(&field.value),
    }
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
