//! `ifExpr`: CEL over `{tool_name, tool_input, depth}` (seed "Matchers"; CONTRACT §2.4, §4.2).
//!
//! The `cel` crate parses and evaluates but has no type checker and no cost accounting,
//! so this module brings its own, after Kubernetes' model:
//!
//! - **Bounds before parsing**: at most [`MAX_EXPR_BYTES`] bytes and
//!   [`MAX_NESTING`] levels of brackets, checked lexically, so a hostile expression can
//!   never overflow the parser's stack.
//! - **Names**: only `tool_name` (string), `tool_input` (map), `depth` (int) and
//!   variables bound by macros (`all`, `exists`, `map`, ...) may be referenced; only the
//!   functions of [`ALLOWED_FUNCTIONS`] (plus operators) may be called.
//! - **Static cost**: every node costs 1; a comprehension costs its body times the size
//!   of its range, where a range that is not a literal list is assumed to hold
//!   [`MAX_LIST_LEN`] items (the declared cap of any list or map inside `tool_input`,
//!   enforced with a 413 before any hook runs). Expressions whose worst case exceeds
//!   [`MAX_COST`] are refused, e.g. nested comprehensions over `tool_input`.
//! - **Runtime bound**: the static cost times the input caps bounds the work of every
//!   evaluation; there is no unbounded loop in CEL, so that bound is the runtime bound.
//! - **`matches()`**: the pattern must be a string literal; it is compiled once, at
//!   validation, with a size limit, and looked up at evaluation (the `cel` crate's own
//!   `matches` would compile it on every call).
//!
//! `has(tool_input['x-y'])` is not CEL (the parser refuses it): write `'x-y' in tool_input`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::extractors::This;
use cel::{Context, ExecutionError, Program, Value};

/// Longest `ifExpr`, in bytes.
pub const MAX_EXPR_BYTES: usize = 2048;
/// Deepest nesting of `(`, `[`, `{`, and of the parsed syntax tree.
pub const MAX_NESTING: usize = 32;
/// Largest static cost estimate accepted.
pub const MAX_COST: u64 = 100_000;
/// Declared cap on the entries of any list or map inside `tool_input` (enforced at
/// dispatch with a 413).
pub const MAX_LIST_LEN: u64 = 1_000;
/// Largest regex program for `matcher` and `matches()`, in bytes (regex `size_limit`).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Functions an `ifExpr` may call, besides operators (`_+_`, `@in`, ...) and macros.
pub const ALLOWED_FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "max",
    "min",
];

const VARIABLES: [&str; 3] = ["tool_name", "tool_input", "depth"];

/// Why an `ifExpr` was refused. Each message says what to change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExprError {
    #[error("is {0} bytes long; at most {MAX_EXPR_BYTES} are allowed")]
    TooLong(usize),
    #[error("nests brackets or calls more than {MAX_NESTING} levels deep")]
    TooDeep,
    #[error("does not parse as CEL: {0}")]
    Parse(String),
    #[error(
        "references {0:?}; only tool_name, tool_input and depth are available (use 'key' in tool_input to test a key)"
    )]
    UnknownVariable(String),
    #[error("calls {0}(), which is not allowed; allowed: {allowed}", allowed = ALLOWED_FUNCTIONS.join(", "))]
    UnknownFunction(String),
    #[error("matches() needs a string literal pattern, so it can be compiled once")]
    DynamicPattern,
    #[error("matches() pattern {0:?} does not compile: {1}")]
    BadPattern(String, String),
    #[error(
        "costs up to {0} steps over the declared input caps (lists of up to {MAX_LIST_LEN} items); at most {MAX_COST} are allowed — avoid nested comprehensions over tool_input"
    )]
    TooCostly(u64),
}

/// A compiled `ifExpr`, ready to evaluate many times.
#[derive(Debug)]
pub struct IfExpr {
    program: Program,
    cost: u64,
}

impl IfExpr {
    /// Validates and compiles `source`. Errors name the rule broken.
    pub fn compile(source: &str) -> Result<IfExpr, ExprError> {
        if source.len() > MAX_EXPR_BYTES {
            return Err(ExprError::TooLong(source.len()));
        }
        if lexical_nesting(source) > MAX_NESTING {
            return Err(ExprError::TooDeep);
        }
        let program =
            Program::compile(source).map_err(|e| ExprError::Parse(first_line(&e.to_string())))?;
        let mut checker = Checker {
            bound: Vec::new(),
            patterns: Vec::new(),
        };
        let cost = checker.cost(program.expression(), 0)?;
        if cost > MAX_COST {
            return Err(ExprError::TooCostly(cost));
        }
        for pattern in checker.patterns {
            register_pattern(&pattern)?;
        }
        Ok(IfExpr { program, cost })
    }

    /// The static cost estimate (see module docs).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Evaluates against `scope` (built once per event by [`EvalScope::new`]).
    /// `Ok(bool)` on a boolean result; `Err` with a message on an evaluation error or a
    /// non-boolean result (an error for the hook: CONTRACT §4.2).
    pub fn evaluate(&self, scope: &EvalScope) -> Result<bool, String> {
        with_root(|root| {
            let mut ctx = root.new_inner_scope();
            ctx.add_variable_from_value("tool_name", scope.tool_name.clone());
            ctx.add_variable_from_value("tool_input", scope.tool_input.clone());
            ctx.add_variable_from_value("depth", scope.depth.clone());
            match self.program.execute(&ctx) {
                Ok(Value::Bool(b)) => Ok(b),
                Ok(other) => Err(format!("ifExpr returned {:?}, not a bool", other.type_of())),
                Err(e) => Err(format!("ifExpr evaluation error: {e}")),
            }
        })
    }
}

/// The variables of one event, converted to CEL values once per event.
pub struct EvalScope {
    tool_name: Value,
    tool_input: Value,
    depth: Value,
}

impl EvalScope {
    /// Converts the event's fields; `tool_input` should be a JSON object (other values
    /// are passed as they are and typically fail map access).
    pub fn new(tool_name: &str, tool_input: &serde_json::Value, depth: i64) -> EvalScope {
        EvalScope {
            tool_name: Value::from(tool_name.to_string()),
            tool_input: json_to_cel(tool_input),
            depth: Value::Int(depth),
        }
    }
}

fn json_to_cel(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.clone()),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(json_to_cel).collect())),
        serde_json::Value::Object(o) => {
            let map: HashMap<String, Value> =
                o.iter().map(|(k, v)| (k.clone(), json_to_cel(v))).collect();
            Value::from(map)
        }
    }
}

// ---- the root context: built once per thread, with our `matches` ----

thread_local! {
    static ROOT: Context<'static, 'static> = build_root();
}

fn with_root<R>(f: impl FnOnce(&Context<'static, 'static>) -> R) -> R {
    ROOT.with(f)
}

fn build_root() -> Context<'static, 'static> {
    let mut root = Context::default();
    root.add_function("matches", cel_matches)
        .expect("the cel crate is built without its own regex matches()");
    root
}

fn cel_matches(
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    let re = lookup_pattern(&pattern).ok_or_else(|| {
        ExecutionError::function_error(
            "matches",
            format!("pattern {pattern:?} was not compiled at validation"),
        )
    })?;
    Ok(re.is_match(&this))
}

/// Compiled `matches()` patterns, keyed by source. Filled at validation only, so it
/// grows with the distinct literal patterns of accepted hooks.
static PATTERNS: LazyLock<RwLock<HashMap<String, Arc<regex::Regex>>>> =
    LazyLock::new(Default::default);

fn register_pattern(pattern: &str) -> Result<(), ExprError> {
    if lookup_pattern(pattern).is_some() {
        return Ok(());
    }
    let re = compile_regex(pattern).map_err(|e| ExprError::BadPattern(pattern.to_string(), e))?;
    PATTERNS
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(pattern.to_string(), Arc::new(re));
    Ok(())
}

fn lookup_pattern(pattern: &str) -> Option<Arc<regex::Regex>> {
    PATTERNS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(pattern)
        .cloned()
}

/// Compiles a regex for `matcher` or `matches()`: Rust `regex` syntax, unanchored,
/// program size at most [`REGEX_SIZE_LIMIT`]. Errors are the regex crate's message,
/// first line only.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => {
                format!("compiles to more than {REGEX_SIZE_LIMIT} bytes")
            }
            other => first_line(&other.to_string()),
        })
}

fn first_line(s: &str) -> String {
    // The regex and cel crates print multi-line messages with a caret diagram; the
    // condition message keeps the whole thing on one line.
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Deepest bracket nesting outside string literals.
fn lexical_nesting(src: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut chars = src.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == '\\' {
                    chars.next();
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    max
}

struct Checker {
    /// Variables bound by enclosing comprehensions.
    bound: Vec<String>,
    /// Literal `matches()` patterns to compile.
    patterns: Vec<String>,
}

impl Checker {
    fn cost(&mut self, e: &IdedExpr, level: usize) -> Result<u64, ExprError> {
        if level > MAX_NESTING * 4 {
            return Err(ExprError::TooDeep);
        }
        let next = level + 1;
        Ok(match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => 1,
            Expr::Ident(name) => {
                if !VARIABLES.contains(&name.as_str()) && !self.bound.iter().any(|b| b == name) {
                    return Err(ExprError::UnknownVariable(name.clone()));
                }
                1
            }
            Expr::Select(s) => 1 + self.cost(&s.operand, next)?,
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                let operator = !name.starts_with(|c: char| c.is_ascii_alphabetic());
                if !operator && !ALLOWED_FUNCTIONS.contains(&name) {
                    return Err(ExprError::UnknownFunction(name.to_string()));
                }
                if name == "matches" {
                    let pattern = if call.target.is_some() {
                        call.args.first()
                    } else {
                        call.args.get(1)
                    };
                    match pattern.map(|p| &p.expr) {
                        Some(Expr::Literal(LiteralValue::String(s))) => {
                            self.patterns.push(s.inner().to_string())
                        }
                        _ => return Err(ExprError::DynamicPattern),
                    }
                }
                let mut c = 1u64;
                if let Some(t) = &call.target {
                    c = c.saturating_add(self.cost(t, next)?);
                }
                for a in &call.args {
                    c = c.saturating_add(self.cost(a, next)?);
                }
                c
            }
            Expr::List(l) => {
                let mut c = 1u64;
                for el in &l.elements {
                    c = c.saturating_add(self.cost(el, next)?);
                }
                c
            }
            Expr::Map(m) => self.entries(&m.entries, next)?,
            Expr::Struct(s) => self.entries(&s.entries, next)?,
            Expr::Comprehension(c) => {
                let range_len = match &c.iter_range.expr {
                    Expr::List(l) => l.elements.len() as u64,
                    Expr::Map(m) => m.entries.len() as u64,
                    _ => MAX_LIST_LEN,
                };
                let range = self.cost(&c.iter_range, next)?;
                let init = self.cost(&c.accu_init, next)?;
                let depth = self.bound.len();
                self.bound.push(c.accu_var.clone());
                self.bound.push(c.iter_var.clone());
                if let Some(v2) = &c.iter_var2 {
                    self.bound.push(v2.clone());
                }
                let body = self
                    .cost(&c.loop_cond, next)?
                    .saturating_add(self.cost(&c.loop_step, next)?);
                let result = self.cost(&c.result, next)?;
                self.bound.truncate(depth);
                range
                    .saturating_add(init)
                    .saturating_add(range_len.max(1).saturating_mul(body))
                    .saturating_add(result)
            }
        })
    }

    fn entries(
        &mut self,
        entries: &[cel::common::ast::IdedEntryExpr],
        level: usize,
    ) -> Result<u64, ExprError> {
        let mut c = 1u64;
        for e in entries {
            c = c.saturating_add(match &e.expr {
                EntryExpr::MapEntry(m) => self
                    .cost(&m.key, level)?
                    .saturating_add(self.cost(&m.value, level)?),
                EntryExpr::StructField(f) => self.cost(&f.value, level)?,
            });
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(
        src: &str,
        tool_name: &str,
        input: serde_json::Value,
        depth: i64,
    ) -> Result<bool, String> {
        let e = IfExpr::compile(src).map_err(|e| format!("compile: {e}"))?;
        e.evaluate(&EvalScope::new(tool_name, &input, depth))
    }

    #[test]
    fn seed_example_matches_long_exec() {
        let src = r#"tool_name == "exec" && size(tool_input.cmd) > 80"#;
        assert_eq!(
            eval(src, "exec", json!({"cmd": "x".repeat(81)}), 0),
            Ok(true)
        );
        assert_eq!(eval(src, "exec", json!({"cmd": "ls"}), 0), Ok(false));
    }

    #[test]
    fn or_absorbs_an_error_on_the_left() {
        let src = r#"tool_input.command == "x" || tool_name == "Bash""#;
        assert_eq!(eval(src, "Bash", json!({}), 0), Ok(true));
    }

    #[test]
    fn and_short_circuits_on_false() {
        assert_eq!(
            eval(
                r#"false && tool_input.command == "x""#,
                "Bash",
                json!({}),
                0
            ),
            Ok(false)
        );
    }

    #[test]
    fn all_absorbs_a_division_error_when_another_item_is_false() {
        assert_eq!(
            eval("[0, 2].all(x, 10 / x > 100)", "t", json!({}), 0),
            Ok(false)
        );
    }

    #[test]
    fn integer_overflow_is_an_evaluation_error() {
        assert!(
            eval("depth + 9223372036854775807 > 0", "t", json!({}), 1)
                .unwrap_err()
                .contains("evaluation error")
        );
        assert!(
            eval("int(1e19) > 0", "t", json!({}), 1)
                .unwrap_err()
                .contains("evaluation error")
        );
    }

    #[test]
    fn missing_key_is_an_evaluation_error() {
        assert!(eval("size(tool_input.cmd) > 1", "t", json!({}), 0).is_err());
    }

    #[test]
    fn non_boolean_result_is_an_error() {
        let err = eval("depth + 1", "t", json!({}), 0).unwrap_err();
        assert!(err.contains("not a bool"), "{err}");
    }

    #[test]
    fn syntax_errors_are_refused_without_panic() {
        for src in ["1 +", "(", "a.b.c(", ")", "tool_name ==", "'unterminated"] {
            assert!(
                matches!(
                    IfExpr::compile(src),
                    Err(ExprError::Parse(_)) | Err(ExprError::UnknownVariable(_))
                ),
                "{src}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        // 10,001 bytes: refused for length first; a short but deep one for depth.
        assert_eq!(
            IfExpr::compile(&deep).unwrap_err(),
            ExprError::TooLong(10_001)
        );
        let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
        assert_eq!(IfExpr::compile(&deep).unwrap_err(), ExprError::TooDeep);
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        assert_eq!(IfExpr::compile(&deep).unwrap_err(), ExprError::TooDeep);
        // brackets inside strings do not count
        let s = format!("tool_name == \"{}\"", "(".repeat(100));
        assert!(IfExpr::compile(&s).is_ok());
    }

    #[test]
    fn has_with_an_index_is_refused() {
        assert!(matches!(
            IfExpr::compile("has(tool_input['x-y'])"),
            Err(ExprError::Parse(_))
        ));
        assert_eq!(
            eval("'x-y' in tool_input", "t", json!({"x-y": 1}), 0),
            Ok(true)
        );
    }

    #[test]
    fn size_counts_code_points() {
        assert_eq!(eval(r#""héllo".size() == 5"#, "t", json!({}), 0), Ok(true));
    }

    #[test]
    fn only_the_three_variables_exist() {
        assert_eq!(
            IfExpr::compile("request.user == 'x'").unwrap_err(),
            ExprError::UnknownVariable("request".into())
        );
        let r = IfExpr::compile("[1, 2].exists(x, x == depth)");
        assert!(r.is_ok(), "{r:?}");
        // a macro variable is bound only inside its macro
        assert_eq!(
            IfExpr::compile("[1].exists(x, x == 1) && x == 1").unwrap_err(),
            ExprError::UnknownVariable("x".into())
        );
    }

    #[test]
    fn unknown_functions_are_refused() {
        assert_eq!(
            IfExpr::compile("launch(tool_name)").unwrap_err(),
            ExprError::UnknownFunction("launch".into())
        );
    }

    #[test]
    fn matches_uses_a_literal_pattern_compiled_once() {
        let e = IfExpr::compile(r#"tool_input.command.matches("^git\\s+push")"#).unwrap();
        let scope = EvalScope::new("Bash", &json!({"command": "git  push origin"}), 0);
        assert_eq!(e.evaluate(&scope), Ok(true));
        let scope = EvalScope::new("Bash", &json!({"command": "git pull"}), 0);
        assert_eq!(e.evaluate(&scope), Ok(false));
        assert_eq!(
            IfExpr::compile("tool_name.matches(tool_input.p)").unwrap_err(),
            ExprError::DynamicPattern
        );
        assert!(matches!(
            IfExpr::compile("tool_name.matches('(')"),
            Err(ExprError::BadPattern(..))
        ));
        // the global form, matches(string, pattern)
        assert_eq!(
            eval(r#"matches(tool_name, "^Ba")"#, "Bash", json!({}), 0),
            Ok(true)
        );
    }

    #[test]
    fn nested_comprehensions_over_tool_input_are_refused_for_cost() {
        let src = "tool_input.items.all(a, tool_input.items.all(b, a != b || a == b))";
        assert!(matches!(IfExpr::compile(src), Err(ExprError::TooCostly(_))));
        // one level over agent input is fine
        let one = IfExpr::compile("tool_input.items.all(a, a != 'rm')").unwrap();
        assert!(one.cost() <= MAX_COST);
        // nested over small literal lists is fine
        assert!(IfExpr::compile("[1,2].all(a, [3,4].all(b, a != b))").is_ok());
    }

    #[test]
    fn a_single_comprehension_over_the_capped_input_runs_fast() {
        let e = IfExpr::compile("tool_input.items.all(a, a.size() < 100)").unwrap();
        let items: Vec<_> = (0..MAX_LIST_LEN)
            .map(|i| json!(format!("item-{i}")))
            .collect();
        let scope = EvalScope::new("t", &json!({"items": items}), 0);
        let started = std::time::Instant::now();
        assert_eq!(e.evaluate(&scope), Ok(true));
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[test]
    fn regex_size_limit_refuses_huge_programs() {
        assert!(compile_regex("a{1000}{1000}").is_err());
        assert!(compile_regex("^(exec|shell)$").is_ok());
    }
}
