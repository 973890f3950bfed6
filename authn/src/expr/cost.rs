//! The static estimate: the worst-case cost of an expression and the worst-case size of each of
//! its values, from its shape alone, any value read from the input as large as a token's payload
//! ([`MAX_INPUT_BYTES`], [`MAX_LIST_ITEMS`] items). In kube-apiserver's units (cel-go
//! `checker/cost.go`, k8s.io/apiserver `pkg/cel/library/cost.go`): an operation costs 1, a
//! constant nothing, traversing, copying or building a string 1 per 10 bytes (and a list 1 per
//! item), a comprehension its body once per item of its range. Sizes grow as the operations make
//! them grow: `+` adds them, `join` adds a separator per item, `replace` may put its replacement
//! at every match, `split` makes a piece per byte.
//!
//! One step beyond cel-go, so that ordinary mappings over token lists fit: a comprehension's body
//! is estimated for an empty item and for the largest item, and charged the first once per item
//! plus the difference once, since the items of a list together are no larger than the list.

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::budget::FORMAT_CLAUSE_BYTES;
use super::{MAX_INPUT_BYTES, MAX_LIST_ITEMS};

/// Bytes traversed or built per unit of cost (cel-go's `StringTraversalCostFactor`, 0.1).
const BYTES_PER_UNIT: u64 = 10;
/// Comprehensions nested deeper than this are charged their largest item once per item: each
/// level of amortization estimates its body twice.
const AMORTIZED_DEPTH: usize = 6;

/// The worst-case size of a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Size {
    /// Bytes of string (or bytes) data, in it and in everything it holds.
    pub bytes: u64,
    /// Its items (a list's) or entries (a map's): how often a comprehension over it runs.
    pub items: u64,
    /// Items and entries, in it and in everything it holds: what copying it copies.
    pub deep: u64,
}

impl Size {
    /// A value read from the input: any claim may be as large as the whole token.
    const INPUT: Size = Size {
        bytes: MAX_INPUT_BYTES,
        items: MAX_LIST_ITEMS,
        deep: MAX_LIST_ITEMS,
    };

    fn bytes(bytes: u64) -> Size {
        Size {
            bytes,
            items: 0,
            deep: 0,
        }
    }

    /// The largest item of this list or map: it may hold all of it.
    fn item(self) -> Size {
        Size {
            items: self.deep,
            ..self
        }
    }

    fn zip(self, other: Size, f: impl Fn(u64, u64) -> u64) -> Size {
        Size {
            bytes: f(self.bytes, other.bytes),
            items: f(self.items, other.items),
            deep: f(self.deep, other.deep),
        }
    }

    fn plus(self, other: Size) -> Size {
        self.zip(other, u64::saturating_add)
    }

    fn max(self, other: Size) -> Size {
        self.zip(other, u64::max)
    }

    fn minus(self, other: Size) -> Size {
        self.zip(other, u64::saturating_sub)
    }

    fn times(self, n: u64) -> Size {
        self.zip(Size::default(), |a, _| a.saturating_mul(n))
    }

    /// What copying it costs.
    fn copy_cost(self) -> u64 {
        bytes_cost(self.bytes).saturating_add(self.deep)
    }
}

/// The estimate of one expression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Estimate {
    /// Its worst-case cost, its parts' included.
    pub cost: u64,
    /// The worst-case size of its value.
    pub size: Size,
    /// The most bytes of any value it reads or builds.
    pub largest: u64,
    /// How many times loop bodies run, at most.
    pub iterations: u64,
}

impl Estimate {
    /// Adds `part`, evaluated as part of this one.
    fn with(mut self, part: Estimate) -> Estimate {
        self.cost = self.cost.saturating_add(part.cost);
        self.iterations = self.iterations.saturating_add(part.iterations);
        self.largest = self.largest.max(part.largest);
        self
    }

    /// An operation costing 1 and `own` more than its `parts`, of `size`.
    fn node(own: u64, size: Size, parts: impl IntoIterator<Item = Estimate>) -> Estimate {
        Estimate::free(own.saturating_add(1), size, parts)
    }

    /// A node costing `own` more than its `parts` (a constant, a conditional), of `size`.
    fn free(own: u64, size: Size, parts: impl IntoIterator<Item = Estimate>) -> Estimate {
        let base = Estimate {
            cost: own,
            size,
            largest: size.bytes,
            iterations: 0,
        };
        parts.into_iter().fold(base, Estimate::with)
    }
}

/// Traversing or building `bytes`.
fn bytes_cost(bytes: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_UNIT)
}

/// Estimates `e` with its scope's variable read from a token.
pub(super) fn estimate(e: &IdedExpr) -> Estimate {
    Estimator::default().estimate(e)
}

#[derive(Default)]
struct Estimator {
    /// Comprehension variables in scope, innermost last.
    bound: Vec<(String, Size)>,
    /// Accumulators in scope (their `+` appends in place).
    accumulators: Vec<String>,
    /// Comprehensions being estimated around the current node.
    depth: usize,
}

impl Estimator {
    fn estimate(&mut self, e: &IdedExpr) -> Estimate {
        match &e.expr {
            Expr::Literal(literal) => {
                let size = match literal {
                    LiteralValue::String(s) => Size::bytes(s.inner().len() as u64),
                    LiteralValue::Bytes(b) => Size::bytes(b.len() as u64),
                    _ => Size::default(),
                };
                Estimate::free(0, size, [])
            }
            Expr::Ident(name) => {
                let size = match self.bound.iter().rev().find(|(n, _)| n == name) {
                    Some((_, size)) => *size,
                    None if super::is_type_name(name) => Size::default(),
                    None => Size::INPUT,
                };
                Estimate::node(0, size, [])
            }
            Expr::Select(s) => {
                let operand = self.estimate(&s.operand);
                let size = if s.test {
                    Size::default()
                } else {
                    operand.size
                };
                Estimate::node(0, size, [operand])
            }
            Expr::Call(c) => self.call(c),
            Expr::List(l) => {
                let parts: Vec<Estimate> = l.elements.iter().map(|e| self.estimate(e)).collect();
                self.aggregate(parts)
            }
            Expr::Map(m) => {
                let parts = m.entries.iter().flat_map(|e| self.entry(e)).collect();
                self.aggregate(parts)
            }
            Expr::Struct(s) => {
                let parts = s.entries.iter().flat_map(|e| self.entry(e)).collect();
                self.aggregate(parts)
            }
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Unspecified => Estimate::node(0, Size::default(), []),
        }
    }

    fn entry(&mut self, e: &cel::common::ast::IdedEntryExpr) -> Vec<Estimate> {
        match &e.expr {
            EntryExpr::MapEntry(entry) => {
                vec![self.estimate(&entry.key), self.estimate(&entry.value)]
            }
            EntryExpr::StructField(field) => vec![self.estimate(&field.value)],
        }
    }

    /// A list or map literal: its parts are copied in.
    fn aggregate(&mut self, parts: Vec<Estimate>) -> Estimate {
        let count = parts.len() as u64;
        let held = parts
            .iter()
            .fold(Size::default(), |size, part| size.plus(part.size));
        let size = Size {
            bytes: held.bytes,
            items: count,
            deep: held.deep.saturating_add(count),
        };
        Estimate::node(size.copy_cost(), size, parts)
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Estimate {
        let range = self.estimate(&c.iter_range);
        let init = self.estimate(&c.accu_init);
        let count = range.size.items;
        self.depth += 1;
        let full = self.body(c, range.size.item());
        let (each, once) = if self.depth <= AMORTIZED_DEPTH {
            let empty = self.body(c, Size::default());
            let extra = Estimate {
                cost: full.cost.saturating_sub(empty.cost),
                size: full.size.minus(empty.size),
                largest: full.largest,
                iterations: full.iterations.saturating_sub(empty.iterations),
            };
            (empty, extra)
        } else {
            (full, Estimate::default())
        };
        self.depth -= 1;
        let loops = Estimate {
            cost: count.saturating_mul(each.cost).saturating_add(once.cost),
            size: Size::default(),
            largest: full.largest,
            iterations: count
                .saturating_add(count.saturating_mul(each.iterations))
                .saturating_add(once.iterations),
        };
        let accumulated = init.size.plus(each.size.times(count)).plus(once.size);
        self.bound.push((c.accu_var.clone(), accumulated));
        let result = self.estimate(&c.result);
        self.bound.pop();
        // Each item is copied into the loop's variable.
        let mut out = Estimate::node(
            range.size.copy_cost(),
            result.size,
            [range, init, loops, result],
        );
        out.largest = out.largest.max(accumulated.bytes);
        out
    }

    fn is_accumulator(&self, name: &str) -> bool {
        self.accumulators.iter().any(|a| a == name)
    }

    /// One run of a comprehension's body (condition and step) on an item of `item`, the
    /// accumulator empty: the estimate's size is what the step adds to it.
    fn body(&mut self, c: &ComprehensionExpr, item: Size) -> Estimate {
        let depth = self.bound.len();
        self.bound.push((c.iter_var.clone(), item));
        if let Some(second) = &c.iter_var2 {
            self.bound.push((second.clone(), item));
        }
        self.bound.push((c.accu_var.clone(), Size::default()));
        self.accumulators.push(c.accu_var.clone());
        let condition = self.estimate(&c.loop_cond);
        let step = self.estimate(&c.loop_step);
        self.accumulators.pop();
        self.bound.truncate(depth);
        Estimate::free(0, step.size, [condition, step])
    }

    fn call(&mut self, c: &CallExpr) -> Estimate {
        let name = c.func_name.as_str();
        if let ("_?_:_", [condition, yes, no]) = (name, c.args.as_slice()) {
            let (condition, yes, no) = (
                self.estimate(condition),
                self.estimate(yes),
                self.estimate(no),
            );
            // Only one branch runs.
            let branch = Estimate {
                cost: yes.cost.max(no.cost),
                size: yes.size.max(no.size),
                largest: yes.largest.max(no.largest),
                iterations: yes.iterations.max(no.iterations),
            };
            return Estimate::free(0, branch.size, [condition, branch]);
        }
        let appends = match (name, c.args.first().map(|a| &a.expr)) {
            ("_+_", Some(Expr::Ident(n))) => self.is_accumulator(n),
            _ => false,
        };
        let parts: Vec<Estimate> = c
            .target
            .as_deref()
            .into_iter()
            .chain(&c.args)
            .map(|e| self.estimate(e))
            .collect();
        if matches!(name, "_&&_" | "_||_") {
            return Estimate::free(0, Size::default(), parts);
        }
        let size = |i: usize| parts.get(i).map_or(Size::default(), |p| p.size);
        let (this, arg) = (size(0), size(1));
        let int_literal = |i: usize| {
            let offset = usize::from(c.target.is_some());
            match i
                .checked_sub(offset)
                .and_then(|i| c.args.get(i))
                .map(|a| &a.expr)
            {
                Some(Expr::Literal(LiteralValue::Int(n))) => u64::try_from(*n.inner()).ok(),
                _ => None,
            }
        };
        let (own, out) = match name {
            // A map or filter appends its item in place (the item's copy is charged by its list).
            "_+_" if appends => (0, this.plus(arg)),
            "_+_" => (this.plus(arg).copy_cost(), this.plus(arg)),
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => (
                bytes_cost(this.bytes.min(arg.bytes)).saturating_add(this.deep.min(arg.deep)),
                Size::default(),
            ),
            "@in" => (
                arg.items
                    .saturating_add(bytes_cost(this.bytes.min(arg.bytes))),
                Size::default(),
            ),
            "_[_]" | "_[?_]" | "_?._" | "dyn" | "value" | "orValue" | "or" => {
                (0, parts.iter().fold(Size::default(), |s, p| s.max(p.size)))
            }
            "!_"
            | "-_"
            | "_-_"
            | "_*_"
            | "_/_"
            | "_%_"
            | "@not_strictly_false"
            | "hasValue"
            | "type"
            | "bool"
            | "size"
            | "int"
            | "uint"
            | "double" => (0, Size::default()),
            "startsWith" | "endsWith" => (bytes_cost(arg.bytes), Size::default()),
            "contains" => (
                bytes_cost(this.bytes.saturating_add(arg.bytes)),
                Size::default(),
            ),
            // Code points are compared window by window.
            "indexOf" | "lastIndexOf" => (
                bytes_cost(this.bytes).saturating_mul(arg.bytes.max(1)),
                Size::default(),
            ),
            // The regular expression's states, guessed at one per 4 bytes of pattern.
            "matches" => (
                bytes_cost(this.bytes.saturating_add(1))
                    .saturating_mul(arg.bytes.div_ceil(4).max(1)),
                Size::default(),
            ),
            "charAt" => (bytes_cost(this.bytes), Size::bytes(4)),
            "string" | "bytes" => (
                bytes_cost(this.bytes),
                Size::bytes(this.bytes.saturating_add(32)),
            ),
            "lowerAscii" | "upperAscii" | "trim" | "substring" | "reverse" | "slice" => {
                (this.copy_cost(), this)
            }
            // The nested items become items.
            "flatten" => (
                this.copy_cost(),
                Size {
                    items: this.deep,
                    ..this
                },
            ),
            "sort" | "@sortByAssociatedKeys" => (
                bytes_cost(this.bytes).saturating_add(
                    this.items
                        .saturating_mul(u64::from(this.items.max(1).ilog2()) + 1),
                ),
                this,
            ),
            "distinct" => (this.items.saturating_mul(this.items), this),
            "replace" if c.target.is_some() => {
                let built = replaced(this, c.args.first(), size(2), int_literal(3));
                (
                    bytes_cost(this.bytes)
                        .saturating_mul(2)
                        .saturating_add(bytes_cost(built.bytes)),
                    built,
                )
            }
            "split" if c.target.is_some() => {
                let pieces = int_literal(2)
                    .unwrap_or(u64::MAX)
                    .min(this.bytes.saturating_add(1));
                let built = Size {
                    bytes: this.bytes,
                    items: pieces,
                    deep: pieces,
                };
                (
                    bytes_cost(this.bytes)
                        .saturating_mul(2)
                        .saturating_add(pieces),
                    built,
                )
            }
            "join" if c.target.is_some() => {
                let built = Size::bytes(
                    this.bytes
                        .saturating_add(this.items.saturating_mul(arg.bytes)),
                );
                (bytes_cost(built.bytes), built)
            }
            "format" if c.target.is_some() => {
                let built = Size::bytes(
                    this.bytes
                        .saturating_mul(FORMAT_CLAUSE_BYTES)
                        .saturating_add(arg.bytes.saturating_mul(2))
                        .saturating_add(arg.deep.saturating_mul(4)),
                );
                (bytes_cost(built.bytes), built)
            }
            // Anything else: its operands traversed, a result as large as all of them.
            _ => {
                let all = parts.iter().fold(Size::default(), |s, p| s.plus(p.size));
                (all.copy_cost(), all)
            }
        };
        Estimate::node(own, out, parts)
    }
}

/// The size of `this.replace(from, to[, n])`: at most one replacement per byte of `this` (and
/// one more) when `from` may be empty, one per `len(from)` bytes when it is a literal.
fn replaced(this: Size, from: Option<&IdedExpr>, to: Size, n: Option<u64>) -> Size {
    let shortest = match from.map(|f| &f.expr) {
        Some(Expr::Literal(LiteralValue::String(s))) => s.inner().len() as u64,
        _ => 0,
    };
    if shortest > 0 && to.bytes <= shortest {
        return Size::bytes(this.bytes);
    }
    let matches = if shortest == 0 {
        this.bytes.saturating_add(1)
    } else {
        this.bytes.div_ceil(shortest)
    };
    let matches = n.map_or(matches, |n| n.min(matches));
    Size::bytes(this.bytes.saturating_add(matches.saturating_mul(to.bytes)))
}
