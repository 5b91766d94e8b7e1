//! The fast path of `ifExpr`: the common shapes — string tests on `tool_name`,
//! `tool_kind`, a field of `tool_input` or of `tool`, `matches()`, `has()`, key
//! membership, integer comparisons of `depth` and `size()`, joined by `&&`, `||` and `!`
//! — evaluated straight on the event's JSON, with no CEL value built (issue 15: the `cel`
//! interpreter spends ~1 µs and ~16 allocations on `tool_input.cmd.startsWith("rm")`).
//!
//! It answers only when every value it reads has the type the shape expects (a string
//! where a string test is made, objects along a path); anything else — a missing field,
//! a number where a string was expected, an input that is not an object — answers
//! `None`, and the caller evaluates the expression with the interpreter, which gives
//! CEL's own result or error. So where it answers, it answers as CEL does (a property test
//! compares the two), and it never turns an error into a boolean.

use std::sync::Arc;

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use serde_json::Value as Json;

use super::Bindings;

/// An expression in the fast path's shapes (see the module docs).
#[derive(Debug)]
pub enum Fast {
    Lit(bool),
    Not(Box<Fast>),
    And(Box<Fast>, Box<Fast>),
    Or(Box<Fast>, Box<Fast>),
    /// `lhs <op> "literal"` (or the literal on the left of `==` / `!=`).
    Str(StrRef, StrOp, Box<str>),
    /// `lhs.matches("literal")`, the pattern compiled at validation.
    Matches(StrRef, Arc<regex::Regex>),
    /// `has(base.field)`: `base` resolves to an object; whether it holds `field`.
    Has(StrRef, Box<str>),
    /// `"key" in base`: as `Has`.
    In(StrRef, Box<str>),
    /// `lhs <op> literal` over integers.
    Int(IntRef, CmpOp, i64),
}

/// Where a string (or, for `Has`/`In`, an object) comes from.
#[derive(Debug, Clone)]
pub enum StrRef {
    ToolName,
    ToolKind,
    /// `tool_input` then these keys (`tool_input` itself when empty).
    Input(Vec<Box<str>>),
    /// A field of `tool` (the canonical call).
    Tool(Box<str>),
}

/// A string test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StrOp {
    Eq,
    Ne,
    StartsWith,
    EndsWith,
    Contains,
}

/// An integer.
#[derive(Debug, Clone)]
pub enum IntRef {
    Depth,
    /// `size()` of a string: its code points.
    Size(StrRef),
}

/// An integer comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl CmpOp {
    fn flip(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }
    fn apply(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

/// The fast form of `e`, or `None` when any part of it is outside the shapes.
/// `pattern` looks up a `matches()` pattern compiled at validation.
pub fn compile(e: &IdedExpr, pattern: &dyn Fn(&str) -> Option<Arc<regex::Regex>>) -> Option<Fast> {
    let go = |e: &IdedExpr| compile(e, pattern);
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(b)) => Some(Fast::Lit(*b.inner())),
        Expr::Select(s) if s.test => {
            let base = str_ref(&s.operand)?;
            matches!(base, StrRef::Input(_)).then(|| Fast::Has(base, s.field.as_str().into()))
        }
        Expr::Call(c) => {
            let name = c.func_name.as_str();
            match (name, c.target.as_deref(), c.args.as_slice()) {
                ("!_", None, [a]) => Some(Fast::Not(Box::new(go(a)?))),
                ("_&&_", None, [a, b]) => Some(Fast::And(Box::new(go(a)?), Box::new(go(b)?))),
                ("_||_", None, [a, b]) => Some(Fast::Or(Box::new(go(a)?), Box::new(go(b)?))),
                ("startsWith" | "endsWith" | "contains", Some(t), [lit]) => {
                    let op = match name {
                        "startsWith" => StrOp::StartsWith,
                        "endsWith" => StrOp::EndsWith,
                        _ => StrOp::Contains,
                    };
                    Some(Fast::Str(str_ref(t)?, op, string(lit)?.into()))
                }
                ("matches", Some(t), [lit]) | ("matches", None, [t, lit]) => {
                    Some(Fast::Matches(str_ref(t)?, pattern(string(lit)?)?))
                }
                ("@in", None, [key, base]) => {
                    let base = str_ref(base)?;
                    let key = string(key)?;
                    matches!(base, StrRef::Input(_)).then(|| Fast::In(base, key.into()))
                }
                ("_==_" | "_!=_", None, [a, b]) => {
                    let eq = name == "_==_";
                    if let Some((r, l)) = str_ref(a)
                        .zip(string(b))
                        .or_else(|| str_ref(b).zip(string(a)))
                    {
                        return Some(Fast::Str(
                            r,
                            if eq { StrOp::Eq } else { StrOp::Ne },
                            l.into(),
                        ));
                    }
                    int_cmp(if eq { CmpOp::Eq } else { CmpOp::Ne }, a, b)
                }
                ("_<_", None, [a, b]) => int_cmp(CmpOp::Lt, a, b),
                ("_<=_", None, [a, b]) => int_cmp(CmpOp::Le, a, b),
                ("_>_", None, [a, b]) => int_cmp(CmpOp::Gt, a, b),
                ("_>=_", None, [a, b]) => int_cmp(CmpOp::Ge, a, b),
                _ => None,
            }
        }
        _ => None,
    }
}

fn string(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

fn int(e: &IdedExpr) -> Option<i64> {
    match &e.expr {
        Expr::Literal(LiteralValue::Int(i)) => Some(*i.inner()),
        _ => None,
    }
}

fn int_ref(e: &IdedExpr) -> Option<IntRef> {
    match &e.expr {
        Expr::Ident(n) if n == "depth" => Some(IntRef::Depth),
        Expr::Call(c) if c.func_name == "size" => match (c.target.as_deref(), c.args.as_slice()) {
            (Some(t), []) | (None, [t]) => Some(IntRef::Size(str_ref(t)?)),
            _ => None,
        },
        _ => None,
    }
}

fn int_cmp(op: CmpOp, a: &IdedExpr, b: &IdedExpr) -> Option<Fast> {
    match int_ref(a).zip(int(b)) {
        Some((r, l)) => Some(Fast::Int(r, op, l)),
        None => Some(Fast::Int(int_ref(b)?, op.flip(), int(a)?)),
    }
}

/// A reference to a string (or an object along `tool_input`).
fn str_ref(e: &IdedExpr) -> Option<StrRef> {
    match &e.expr {
        Expr::Ident(n) => match n.as_str() {
            "tool_name" => Some(StrRef::ToolName),
            "tool_kind" => Some(StrRef::ToolKind),
            "tool_input" => Some(StrRef::Input(Vec::new())),
            _ => None,
        },
        Expr::Select(s) if !s.test => match &s.operand.expr {
            Expr::Ident(n) if n == "tool" => Some(StrRef::Tool(s.field.as_str().into())),
            _ => match str_ref(&s.operand)? {
                StrRef::Input(mut path) => {
                    path.push(s.field.as_str().into());
                    Some(StrRef::Input(path))
                }
                _ => None,
            },
        },
        Expr::Call(c) if c.func_name == "_[_]" && c.target.is_none() => match c.args.as_slice() {
            [base, key] => match str_ref(base)? {
                StrRef::Input(mut path) => {
                    path.push(string(key)?.into());
                    Some(StrRef::Input(path))
                }
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

impl Fast {
    /// The value, or `None` when a value read is not of the expected type (evaluate
    /// with the interpreter then).
    pub fn eval(&self, b: &Bindings<'_>) -> Option<bool> {
        Some(match self {
            Fast::Lit(v) => *v,
            Fast::Not(a) => !a.eval(b)?,
            // CEL's && and || are commutative over errors: a side that is false (&&) or
            // true (||) decides even when the other errs. Unsure on either side with the
            // other not deciding: the interpreter decides.
            // The right side is read only when the left does not decide.
            Fast::And(x, y) => match x.eval(b) {
                Some(false) => false,
                left => match (left, y.eval(b)) {
                    (_, Some(false)) => false,
                    (Some(true), Some(true)) => true,
                    _ => return None,
                },
            },
            Fast::Or(x, y) => match x.eval(b) {
                Some(true) => true,
                left => match (left, y.eval(b)) {
                    (_, Some(true)) => true,
                    (Some(false), Some(false)) => false,
                    _ => return None,
                },
            },
            Fast::Str(r, op, lit) => {
                let s = text(r, b)?;
                match op {
                    StrOp::Eq => s == &**lit,
                    StrOp::Ne => s != &**lit,
                    StrOp::StartsWith => s.starts_with(&**lit),
                    StrOp::EndsWith => s.ends_with(&**lit),
                    StrOp::Contains => s.contains(&**lit),
                }
            }
            Fast::Matches(r, re) => re.is_match(text(r, b)?),
            Fast::Has(base, key) | Fast::In(base, key) => match json(base, b)? {
                Json::Object(o) => o.contains_key(&**key),
                _ => return None,
            },
            Fast::Int(r, op, lit) => {
                let v = match r {
                    IntRef::Depth => b.depth,
                    IntRef::Size(s) => text(s, b)?.chars().count() as i64,
                };
                op.apply(v, *lit)
            }
        })
    }
}

/// The JSON value at a `tool_input` path, through objects only.
fn json<'e>(r: &StrRef, b: &Bindings<'e>) -> Option<&'e Json> {
    let StrRef::Input(path) = r else { return None };
    path.iter().try_fold(b.tool_input, |v, k| match v {
        Json::Object(o) => o.get(&**k),
        _ => None,
    })
}

/// The string `r` refers to, if it is one.
fn text<'e>(r: &StrRef, b: &Bindings<'e>) -> Option<&'e str> {
    match r {
        StrRef::ToolName => Some(b.tool_name),
        StrRef::ToolKind => Some(b.facts.map_or("", |f| f.kind.as_str())),
        StrRef::Input(_) => json(r, b)?.as_str(),
        StrRef::Tool(field) => {
            // Without a tool, every `tool` string is "" (ToolFacts::none()).
            let f = b.facts;
            Some(match &**field {
                "kind" => f.map_or(crate::tool::ToolKind::Other.as_str(), |f| f.kind.as_str()),
                "command" => f.map_or("", |f| &f.command),
                "cwd" => f.map_or("", |f| &f.cwd),
                "query" => f.map_or("", |f| &f.query),
                "mcp_server" => f.map_or("", |f| &f.mcp_server),
                "mcp_tool" => f.map_or("", |f| &f.mcp_tool),
                "agent_type" => f.map_or("", |f| &f.agent_type),
                _ => return None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EvalScope, IfExpr};
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const STRINGS: &[&str] = &[
        "tool_name",
        "tool_kind",
        "tool_input.cmd",
        "tool_input[\"cmd\"]",
        "tool_input.a.b",
        "tool.command",
        "tool.cwd",
        "tool_input.n",
        "tool_input",
        "tool.kind",
    ];
    const TESTS: &[&str] = &[
        "{}.startsWith(\"rm\")",
        "{}.endsWith(\"/\")",
        "{}.contains(\"m -\")",
        "{} == \"rm -rf /\"",
        "\"ls\" != {}",
        "{}.matches(\"^r.*f\")",
        "size({}) > 3",
        "{}.size() <= 2",
        "matches({}, \"s$\")",
    ];
    const BOOLS: &[&str] = &[
        "has(tool_input.cmd)",
        "has(tool_input.a.b)",
        "\"cmd\" in tool_input",
        "depth >= 2",
        "3 < depth",
        "true",
        "false",
        "depth == 1",
    ];

    fn atom() -> impl Strategy<Value = String> {
        prop_oneof![
            (0..TESTS.len(), 0..STRINGS.len())
                .prop_map(|(t, s)| TESTS[t].replace("{}", STRINGS[s])),
            (0..BOOLS.len()).prop_map(|b| BOOLS[b].to_string()),
        ]
    }

    fn expr() -> impl Strategy<Value = String> {
        atom().prop_recursive(3, 12, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) && ({b})")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) || ({b})")),
                inner.prop_map(|a| format!("!({a})")),
            ]
        })
    }

    fn input() -> impl Strategy<Value = serde_json::Value> {
        let cmd = prop_oneof![
            Just(json!("rm -rf /")),
            Just(json!("ls")),
            Just(json!("")),
            Just(json!("ünïcødé s")),
            Just(json!(5)),
            Just(json!(null)),
            Just(json!(["rm"])),
        ];
        let a = prop_oneof![
            Just(json!({"b": "rm -x/"})),
            Just(json!({"b": 1})),
            Just(json!({})),
            Just(json!("a")),
        ];
        (
            prop::option::of(cmd),
            prop::option::of(a),
            prop::option::of(0i64..5),
            0..8u8,
        )
            .prop_map(|(cmd, a, n, shape)| {
                if shape == 0 {
                    return json!(["not", "an", "object"]);
                }
                let mut o = serde_json::Map::new();
                if let Some(c) = cmd {
                    o.insert("cmd".into(), c);
                }
                if let Some(a) = a {
                    o.insert("a".into(), a);
                }
                if let Some(n) = n {
                    o.insert("n".into(), json!(n));
                }
                json!(o)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Where the fast path answers, it answers as the interpreter does.
        #[test]
        fn agrees_with_the_interpreter(src in expr(), input in input(), depth in 0i64..4, tool in any::<bool>(), name in 0..3usize) {
            let Ok(e) = IfExpr::compile(&src) else { return Ok(()) };
            let facts = crate::tool::ToolFacts {
                command: "rm -rf /tmp".into(),
                cwd: "/".into(),
                ..crate::tool::ToolFacts::none()
            };
            let tool_name = ["exec", "", "Bash"][name];
            let b = Bindings { tool_name, tool_input: &input, depth, facts: tool.then_some(&facts) };
            let fast = e.fast.as_ref().and_then(|f| f.eval(&b));
            let slow = e.interpret(&b, &mut EvalScope::default());
            if let Some(v) = fast {
                prop_assert_eq!(Ok(v), slow.clone(), "{} on {}", src, input);
            }
            // (An error's text may print a map in hash order: compare the outcome.)
            prop_assert_eq!(e.evaluate(&b, &mut EvalScope::default()).ok(), slow.ok());
        }
    }

    #[test]
    fn the_common_shapes_have_a_fast_path_others_do_not() {
        for src in [
            r#"tool_input.cmd.startsWith("rm -rf /data1")"#,
            r#"tool_name == "exec" && size(tool_input.cmd) > 80"#,
            r#"tool_kind == "shell" && tool.command.contains("rm -rf")"#,
            r#"has(tool_input.cmd) && !("cwd" in tool_input) || depth > 2"#,
            r#"tool.command.matches("^git\\s+push")"#,
        ] {
            let e = IfExpr::compile(src).unwrap();
            // It answers on a well-typed event, and as the interpreter does: a fast path
            // that always deferred would pass the property test below.
            let input = json!({"cmd": "git push origin main", "cwd": "/"});
            let facts = crate::tool::ToolFacts {
                kind: crate::tool::ToolKind::Shell,
                command: "git push -f".into(),
                ..crate::tool::ToolFacts::none()
            };
            let b = Bindings {
                tool_name: "exec",
                tool_input: &input,
                depth: 3,
                facts: Some(&facts),
            };
            let fast = e.fast.as_ref().and_then(|f| f.eval(&b));
            assert!(fast.is_some(), "{src}: no fast answer");
            assert_eq!(
                fast.ok_or(String::new()),
                e.interpret(&b, &mut EvalScope::default()),
                "{src}"
            );
        }
        for src in [
            "tool_input.items.exists(x, x == 'a')",
            "tool_name == 'a' ? true : false",
            "depth > 2.0",
            "tool.paths.exists(p, p.startsWith('/etc'))",
        ] {
            assert!(!IfExpr::compile(src).unwrap().has_fast_path(), "{src}");
        }
    }

    #[test]
    fn an_unexpected_type_defers_to_the_interpreter_and_its_error() {
        let e = IfExpr::compile(r#"tool_input.cmd.startsWith("rm")"#).unwrap();
        let input = json!({"cmd": 5});
        let b = Bindings::new("exec", &input, 0);
        assert_eq!(e.fast.as_ref().unwrap().eval(&b), None);
        assert!(
            e.evaluate(&b, &mut EvalScope::default()).is_err(),
            "an error, never false"
        );
        let missing = json!({});
        let b = Bindings::new("exec", &missing, 0);
        assert!(e.evaluate(&b, &mut EvalScope::default()).is_err());
        // false && error is false in CEL, and on the fast path.
        let e = IfExpr::compile(r#"tool_name == "x" && tool_input.cmd.startsWith("rm")"#).unwrap();
        assert_eq!(e.fast.as_ref().unwrap().eval(&b), Some(false));
        assert_eq!(e.interpret(&b, &mut EvalScope::default()), Ok(false));
    }
}
