use std::cell::Cell;

use super::*;

fn compile(source: &str) -> Result<Expression, CompileError> {
    Expression::compile(source, Scope::Claims)
}

#[test]
fn expressions_see_only_their_scope() {
    assert!(compile("claims.sub").is_ok());
    assert!(compile("claims.groups.map(g, 'oidc:' + g)").is_ok());
    assert!(compile("claims.groups.all(g, g.startsWith('team-'))").is_ok());
    assert!(compile("type(claims.sub) == string").is_ok());
    assert_eq!(
        compile("user.username").err(),
        Some(CompileError::Undeclared {
            name: "user".into(),
            allowed: "claims"
        })
    );
    assert!(Expression::compile("user.username.startsWith('x')", Scope::User).is_ok());
    assert!(matches!(
        Expression::compile("claims.sub", Scope::User),
        Err(CompileError::Undeclared { .. })
    ));
    // A comprehension's variable is bound only inside it.
    assert!(matches!(
        compile("claims.groups.all(g, g != '') && g == ''"),
        Err(CompileError::Undeclared { .. })
    ));
}

#[test]
fn bad_expressions_are_configuration_errors() {
    assert_eq!(compile("  ").err(), Some(CompileError::Empty));
    assert!(matches!(
        compile("claims.sub +"),
        Err(CompileError::Syntax(_))
    ));
    let long = format!("claims.sub == '{}'", "a".repeat(MAX_EXPRESSION));
    assert!(matches!(compile(&long), Err(CompileError::TooLong(_))));
}

#[test]
fn nested_comprehensions_over_token_lists_cost_too_much() {
    let one = compile("claims.groups.exists(g, g == 'admins')").expect("one level");
    assert!(one.cost() < COST_LIMIT, "{}", one.cost());
    let nested = compile("claims.groups.all(a, claims.groups.all(b, a != b))");
    assert!(
        matches!(nested, Err(CompileError::TooCostly { iterations, .. })
            if iterations > MAX_LIST_ITEMS * MAX_LIST_ITEMS),
        "{nested:?}"
    );
}

/// Issue 42's reproduction: a claim the bearer sets, replaced into itself at every `a`.
const GROWTH: &str = "claims.s.replace('a', claims.s)";

/// Claims as the issue's token carried them: `s` holds `a_count` `a`s.
fn claims_with(a_count: usize) -> Value {
    to_cel(&serde_json::json!({"sub": "alice", "s": "a".repeat(a_count)}))
}

#[test]
fn growth_of_strings_is_estimated_and_refused_at_load() {
    let refused = compile(GROWTH).expect_err("refused");
    let CompileError::TooCostly {
        cost,
        largest,
        iterations,
    } = refused
    else {
        panic!("{refused:?}");
    };
    // Up to 24 Ki matches, each replaced by up to 24 KiB.
    assert!(largest > MAX_INPUT_BYTES * MAX_INPUT_BYTES, "{largest}");
    assert!(cost > 50 * COST_LIMIT, "{cost}");
    assert_eq!(iterations, 0);
    assert_eq!(
        refused.to_string(),
        format!(
            "estimated cost {cost} exceeds the limit of 1000000 (worst case on a payload of 24576 \
             bytes: values of up to {largest} bytes, 0 loop iterations)"
        )
    );
    // The other ways a string or list grows beyond its operands.
    for source in [
        "claims.s.replace('', claims.t)",
        "claims.s.replace('a', claims.t + claims.t).size() > 0",
        "claims.groups.join(claims.s)",
        "claims.groups.map(g, claims.s)",
        "claims.s.split('').map(c, claims.s)",
        "claims.groups.map(g, g.replace('a', claims.s))",
        "[claims.s, claims.s].map(x, x.replace('a', x)).join()",
        "claims.s.replace('a', 'x'.replace('x', claims.s))",
    ] {
        assert!(
            matches!(compile(source), Err(CompileError::TooCostly { .. })),
            "{source}: {:?}",
            compile(source).map(|e| e.cost())
        );
    }
}

#[test]
fn the_budget_alone_stops_the_issues_expression() {
    // Were the estimate to let it through, the issue's token would still not build its 64 MB.
    let program = env().compile(GROWTH).expect("parses");
    let mut context = Context::with_env(env());
    context.add_variable_from_value("claims", claims_with(8000));
    let (unmetered, held) = peak(|| program.execute(&context));
    assert!(matches!(unmetered, Ok(Value::String(s)) if s.len() == 64_000_000));
    assert!(held > 64_000_000, "{held}");
    let metered = budget::meter(program.expression());
    let ((value, spent), held) =
        peak(|| budget::within(EVAL_BUDGET, || Value::resolve(&metered, &context)));
    assert!(spent && value.is_err(), "{value:?}");
    assert!(held < 1 << 20, "{held} bytes held");
}

#[test]
fn ordinary_expressions_are_far_below_the_limit() {
    // The estimates (a change of the model shows here): each well under the limit.
    let claims = [
        ("claims.sub", 2),
        ("claims.email", 2),
        ("'oidc:' + claims.email", 14_750),
        ("claims.sub + '-id'", 14_749),
        ("has(claims.email) ? claims.email : claims.sub", 4),
        ("claims.email_verified ? claims.email : ''", 4),
        ("has(claims.tenant) ? claims.tenant : ''", 4),
        ("claims.exp - claims.iat <= 86400", 6),
        ("claims.sub != 'root'", 4),
        ("size(claims.groups) > 0", 4),
        ("'admins' in claims.groups", 12_292),
        ("claims.groups.exists(g, g == 'admins')", 88_479),
        ("claims.groups.all(g, g.startsWith('team-'))", 88_478),
        ("claims.groups.map(g, 'oidc:' + g)", 142_547),
        ("claims.roles.map(r, 'role:' + r)", 142_547),
        (
            "claims.groups.filter(g, g.startsWith('team-')).map(g, g.substring(5))",
            282_634,
        ),
        ("claims.email.replace('@', '.')", 7_377),
        ("claims.email.split('@')[0]", 29_497),
        ("claims.groups.join(',')", 3_690),
        ("'%s/%s'.format([claims.iss, claims.sub])", 49_418),
        ("claims.email.lowerAscii().endsWith('@example.com')", 14_752),
        ("claims.email.matches('^[a-z.]+@example[.]com$')", 14_751),
    ];
    let user = [
        ("!user.username.startsWith('system:')", 5),
        ("user.groups.all(g, !g.startsWith('system:'))", 100_766),
    ];
    let request = [
        ("request.user.startsWith('system:serviceaccount:')", 6),
        ("!('system:masters' in request.groups)", 12_294),
        ("request.resourceAttributes.namespace == 'team-a'", 5),
    ];
    let mut costs = Vec::new();
    for (rows, scope) in [
        (&claims[..], Scope::Claims),
        (&user[..], Scope::User),
        (&request[..], Scope::Request),
    ] {
        for (source, _) in rows {
            let e = Expression::compile(source, scope).expect(source);
            assert!(e.cost() < COST_LIMIT / 2, "{source}: {}", e.cost());
            costs.push((*source, e.cost()));
        }
    }
    let want: Vec<(&str, u64)> = claims
        .iter()
        .chain(&user)
        .chain(&request)
        .copied()
        .collect();
    assert_eq!(costs, want);
}

#[test]
fn the_issues_token_maps_with_ordinary_expressions() {
    // 8,000 `a`s: the issue's 11 KB token.
    let token = claims_with(8000);
    for (source, want) in [
        ("size(claims.s)", Value::Int(8000)),
        ("'x:' + claims.sub", Value::from("x:alice")),
        (
            "claims.s.replace('a', 'b').startsWith('bbb')",
            Value::Bool(true),
        ),
        ("claims.s.split('').size()", Value::Int(8000)),
        (
            "claims.s.split('').map(c, c + c).join().size()",
            Value::Int(16_000),
        ),
    ] {
        let e = compile(source).expect(source);
        assert_eq!(e.eval(&token), Ok(want), "{source}");
    }
}

#[test]
fn the_budget_stops_growth_the_estimate_lets_through() {
    // 300 bytes for every `a`: up to 7.4 MB from the largest token, within the estimate's limit.
    let source = format!("claims.s.replace('a', '{}')", "x".repeat(300));
    let e = compile(&source).expect("within the estimate");
    assert!(e.cost() <= COST_LIMIT, "{}", e.cost());
    // The issue's token: 2.4 MB, within the budget.
    let (value, _) = peak(|| e.eval(&claims_with(8000)));
    assert!(matches!(value, Ok(Value::String(s)) if s.len() == 2_400_000));
    // 20,000 `a`s (a token under 32 KiB): 6 MB, over it; refused before the string is built.
    let spent = Err(EvalError(format!(
        "evaluation exceeded its budget of {EVAL_BUDGET} bytes built or copied"
    )));
    let large = claims_with(20_000);
    let (value, held) = peak(|| e.eval(&large));
    assert_eq!(value, spent);
    assert!(held < 1 << 20, "{held} bytes held");
    // The same budget for every way of growing: copies into a list, concatenations.
    let items = to_cel(&serde_json::json!({"l": vec![1; 10_000]}));
    let copies = format!("[{}].size()", ["claims.l"; 40].join(", "));
    let sums = ["claims.l"; 9].join(" + ");
    for source in [copies.as_str(), sums.as_str()] {
        let e = compile(source).expect(source);
        assert!(e.cost() <= COST_LIMIT, "{source}: {}", e.cost());
        assert!(e.eval(&to_cel(&serde_json::json!({"l": [1, 2]}))).is_ok());
        let (value, held) = peak(|| e.eval(&items));
        assert_eq!(value, spent, "{source}");
        assert!(
            held < 4 * EVAL_BUDGET as usize,
            "{source}: {held} bytes held"
        );
    }
    // A spent budget fails the evaluation even where `exists` would absorb the error.
    let absorbed = format!(
        "[claims.s, 'x'].exists(v, v.replace('a', '{}').size() > 0 || v == 'x')",
        "x".repeat(300)
    );
    let e = compile(&absorbed).expect("within the estimate");
    let mut context = Context::with_env(env());
    context.add_variable_from_value("claims", large.clone());
    let absorbing = budget::within(EVAL_BUDGET, || Value::resolve(&e.metered, &context));
    assert_eq!(absorbing, (Ok(Value::Bool(true)), true));
    assert_eq!(e.eval(&large), spent);
    assert_eq!(e.eval(&claims_with(10)), Ok(Value::Bool(true)));
}

#[test]
fn charges_change_no_result() {
    let claims = to_cel(&serde_json::json!({
        "sub": "alice",
        "email": "Alice@Example.com",
        "groups": ["b", "a", "c", "a"],
        "nested": [[1, 2], [3]],
        "m": {"k": "v", "n": 1},
        "n": 3,
    }));
    for source in [
        "claims.groups.map(g, 'x:' + g)",
        "claims.groups.filter(g, g != 'a')",
        "claims.groups.exists_one(g, g == 'b')",
        "claims.groups.all(g, g.size() == 1)",
        "claims.groups.sortBy(g, g)",
        "claims.groups.sort().reverse()",
        "['b', 'a', 'b'].distinct()",
        "claims.nested.flatten()",
        "claims.groups.slice(1, 3)",
        "claims.groups.join('-')",
        "claims.groups.join()",
        "claims.email.replace('a', 'AA')",
        "claims.email.replace('', '.')",
        "claims.email.replace('l', 'L', 1)",
        "claims.email.replace('l', 'L', -1)",
        "claims.email.split('@')",
        "claims.email.split('', 3)",
        "'%s is %d'.format([claims.sub, claims.n])",
        "claims.email.lowerAscii() + claims.email.upperAscii().trim()",
        "claims.groups + ['d'] + claims.groups",
        "{'a': claims.sub, claims.sub: [claims.n]}",
        "[?claims.?missing, claims.sub]",
        "claims.?m.?k.orValue('none')",
        "claims.m.map(k, k + '=').sort()",
        "string(claims.n) + string(b'xy')",
        "claims.email.substring(2, 5) + claims.email.charAt(0)",
        // Errors stay errors.
        "claims.groups.join(1)",
        "claims.m.join()",
        "claims.nested.join()",
        "claims.n.replace('a', 'b')",
        "claims.email.replace('a', 1)",
        "claims.missing + 'x'",
    ] {
        let e = compile(source).expect(source);
        let mut context = Context::with_env(env());
        context.add_variable_from_value("claims", claims.clone());
        let plain = e.program.execute(&context).map_err(|e| e.to_string());
        let metered = e.eval(&claims).map_err(|e| e.0);
        assert_eq!(
            metered.is_ok(),
            plain.is_ok(),
            "{source}: {metered:?} {plain:?}"
        );
        if plain.is_ok() {
            assert_eq!(metered, plain, "{source}");
        }
    }
}

#[test]
fn map_and_filter_still_append_in_place() {
    // 10,000 items: one copy each, not one of the whole result per item.
    let many = to_cel(&serde_json::json!({"groups": vec!["g"; 10_000]}));
    let e = compile("claims.groups.map(g, 'x:' + g).filter(g, g != '').size()").expect("ok");
    assert_eq!(e.eval(&many), Ok(Value::Int(10_000)));
}

/// `f`'s result, and the most bytes this thread held allocated at once while it ran.
fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = tracking::LIVE.with(Cell::get);
    tracking::PEAK.with(|p| p.set(base));
    let out = f();
    (out, tracking::PEAK.with(Cell::get).saturating_sub(base))
}

/// Counts what each thread holds allocated (the test binary's allocator).
mod tracking {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        pub static LIVE: Cell<usize> = const { Cell::new(0) };
        pub static PEAK: Cell<usize> = const { Cell::new(0) };
    }

    struct Tracking;

    #[global_allocator]
    static GLOBAL: Tracking = Tracking;

    // SAFETY: every call is System's; the counters are const-initialized thread-locals without
    // destructors, so updating them never allocates.
    unsafe impl GlobalAlloc for Tracking {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: as `GlobalAlloc::alloc`, the caller's contract passed on.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                let _ = LIVE.try_with(|live| {
                    live.set(live.get() + layout.size());
                    let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
                });
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as `GlobalAlloc::dealloc`, the caller's contract passed on.
            unsafe { System.dealloc(ptr, layout) };
            let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
        }
    }
}

#[test]
fn reads_of_a_claim_are_found_wherever_they_are() {
    let reads = |source: &str, claim: &str| compile(source).expect(source).reads_claim(claim);
    assert!(reads("claims.email", "email"));
    assert!(reads(
        "has(claims.email) ? claims.email : claims.sub",
        "email"
    ));
    assert!(reads(
        "claims.email_verified ? claims.email : ''",
        "email_verified"
    ));
    assert!(!reads("claims.emails", "email"));
    assert!(!reads("claims.sub", "email"));
}

#[test]
fn evaluation_sees_the_claims() {
    let claims = to_cel(&serde_json::json!({"sub": "alice", "groups": ["a", "b"]}));
    let e = compile("claims.groups.map(g, 'x:' + g)").expect("ok");
    let value = e.eval(&claims).expect("value");
    assert_eq!(
        value,
        Value::List(Arc::new(vec!["x:a".into(), "x:b".into()]))
    );
    let missing = compile("claims.email").expect("ok");
    assert!(missing.eval(&claims).is_err());
}

#[test]
fn match_conditions_see_the_request() {
    let request = |source: &str| Expression::compile(source, Scope::Request);
    assert!(request("request.user.startsWith('system:serviceaccount:')").is_ok());
    assert!(matches!(
        request("claims.sub == 'x'"),
        Err(CompileError::Undeclared {
            allowed: "request",
            ..
        })
    ));
    let spec = to_cel(&serde_json::json!({
        "user": "system:serviceaccount:team-a:builder",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "resourceAttributes": {"namespace": "team-a", "verb": "get"},
    }));
    let namespace = request("request.resourceAttributes.namespace == 'team-a'").expect("ok");
    assert_eq!(namespace.eval_bool(&spec), Ok(true));
    let groups = request("'system:masters' in request.groups").expect("ok");
    assert_eq!(groups.eval_bool(&spec), Ok(false));
    let user = request("request.user").expect("ok");
    assert_eq!(
        user.eval_bool(&spec),
        Err(EvalError("must evaluate to bool but got string".into()))
    );
    let missing = request("request.nonResourceAttributes.path == '/healthz'").expect("ok");
    assert!(missing.eval_bool(&spec).is_err());
}

#[test]
fn known_result_types() {
    let known = |source: &str| {
        Expression::compile(source, Scope::Request)
            .expect(source)
            .known_type()
    };
    for source in [
        "request.user == 'a'",
        "'g' in request.groups",
        "has(request.resourceAttributes) && request.uid != ''",
        "request.groups.exists(g, g == 'a')",
        "request.groups.all(g, g != '')",
        "request.user.startsWith('system:')",
        "true ? false : true",
    ] {
        assert_eq!(known(source), Some("bool"), "{source}");
    }
    assert_eq!(known("'text'"), Some("string"));
    assert_eq!(known("size(request.groups)"), Some("int"));
    assert_eq!(known("request.groups.map(g, g + 'x')"), Some("list"));
    assert_eq!(known("{'a': 1}"), Some("map"));
    assert_eq!(known("request.user"), None);
    assert_eq!(known("request.extra['k'][0] + ''"), None);
    assert_eq!(known("true ? 1 : 'a'"), None);
}
