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
//! - **Static cost**: every node costs 1, and each value carries a worst-case size: a
//!   value from the input is as large as the input's caps ([`MAX_LIST_LEN`] units: the
//!   declared cap of any list or map inside `tool_input`, enforced with a 413 before any
//!   hook runs), a field or element is no larger than its container, and one item of a
//!   range of `n` taken from the input is `MAX_LIST_LEN / n` (the items share the caps).
//!   Concatenation, `in`, equality and string functions cost the size of their operands;
//!   a comprehension costs its body times the size of its range. Expressions whose worst
//!   case exceeds [`MAX_COST`] are refused: nested comprehensions over `tool_input`,
//!   membership tests over the input inside a loop over the input, `map` over the input
//!   (its accumulator is copied on every step), lists joined to themselves.
//! - **Runtime bound**: CEL has no unbounded loop, so the static cost over the capped
//!   input bounds the work of every evaluation; the `cel` crate cannot be interrupted,
//!   so this bound is the runtime bound (tests evaluate the costliest accepted shapes at
//!   the caps).
//! - **Boolean**: roots that are obviously not boolean (arithmetic, lists, maps,
//!   non-boolean literals, conversions) are refused; anything else that yields a
//!   non-boolean is an evaluation error, fail-closed.
//! - **`matches()`**: the pattern must be a string literal; it is compiled once, at
//!   validation, with a size limit, and looked up at evaluation (the `cel` crate's own
//!   `matches` would compile it on every call).
//!
//! `has(tool_input['x-y'])` is not CEL (the parser refuses it): write `'x-y' in tool_input`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
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
];

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
    #[error("is {0}, not a boolean expression; compare it, e.g. `depth + 1 > 2`")]
    NotBoolean(&'static str),
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
    reads: Reads,
    /// The fast path, when the expression is in its shapes ([`fast`]).
    fast: Option<fast::Fast>,
}

pub mod fast;

/// Which of the event's variables an expression reads, found once at compile time, so
/// that an evaluation converts only those (issue 15: a decision's cost does not grow
/// with the parts of `tool_input` no filter reads).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reads {
    pub tool_name: bool,
    pub depth: bool,
    pub tool_kind: bool,
    pub tool: bool,
    pub tool_input: InputReads,
}

/// What an expression reads of `tool_input`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum InputReads {
    /// Nothing: `tool_input` is not referenced.
    #[default]
    Nothing,
    /// Only these top-level fields (sorted, no repeats): every reference is a field
    /// selection (`tool_input.f`, `has(tool_input.f)`), an index by a string literal
    /// (`tool_input["f"]`) or a membership test of a string literal (`"f" in
    /// tool_input`). The expression sees a map of just those fields, which answers all
    /// of these exactly as the whole map does.
    Fields(Arc<[String]>),
    /// The whole input (any other use: `size(tool_input)`, a comprehension over it, ...).
    Whole,
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
        if let Some(what) = non_boolean_root(program.expression()) {
            return Err(ExprError::NotBoolean(what));
        }
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
        let reads = reads_of(program.expression());
        let fast = fast::compile(program.expression(), &lookup_pattern);
        Ok(IfExpr {
            program,
            cost,
            reads,
            fast,
        })
    }

    /// The compiled form of `source`, shared with every other hook whose `ifExpr` is the
    /// same text (compiled once per distinct expression while any hook holds it).
    pub fn shared(source: &str) -> Result<Arc<IfExpr>, ExprError> {
        static SHARED: LazyLock<crate::interned::Interned<IfExpr>> =
            LazyLock::new(Default::default);
        SHARED.get_or_try_insert(source, IfExpr::compile)
    }

    /// The static cost estimate (see module docs).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// What the expression reads of the event.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// Evaluates against the event's `bindings`, converting into `scope` (one per event)
    /// what this expression reads and the scope does not hold yet. `Ok(bool)` on a
    /// boolean result; `Err` with a message on an evaluation error or a non-boolean
    /// result (an error for the hook: CONTRACT §4.2).
    pub fn evaluate(&self, bindings: &Bindings<'_>, scope: &mut EvalScope) -> Result<bool, String> {
        if let Some(answer) = self.fast.as_ref().and_then(|f| f.eval(bindings)) {
            return Ok(answer);
        }
        self.interpret(bindings, scope)
    }

    /// Whether the expression has a fast path ([`fast`]).
    pub fn has_fast_path(&self) -> bool {
        self.fast.is_some()
    }

    /// Evaluates with the CEL interpreter only (what the fast path must agree with).
    pub fn interpret(
        &self,
        bindings: &Bindings<'_>,
        scope: &mut EvalScope,
    ) -> Result<bool, String> {
        scope.prepare(&self.reads, bindings)?;
        let vars = scope.vars(&self.reads);
        with_root(|root| {
            let mut ctx = inner_scope(root);
            ctx.set_variable_resolver(&vars);
            match self.program.execute(&ctx) {
                Ok(Value::Bool(b)) => Ok(b),
                Ok(other) => Err(format!("ifExpr returned {:?}, not a bool", other.type_of())),
                Err(e) => Err(format!("ifExpr evaluation error: {e}")),
            }
        })
    }
}

/// A child scope of the root whose variables may borrow for `'a` (the root's are
/// `'static`; `Context` is covariant in both lifetimes).
fn inner_scope<'a>(root: &'a Context<'a, 'a>) -> Context<'a, 'a> {
    root.new_inner_scope()
}

/// The event's variables as an `ifExpr` sees them, borrowed: nothing is converted until
/// an expression reads it.
#[derive(Debug, Clone, Copy)]
pub struct Bindings<'e> {
    pub tool_name: &'e str,
    pub tool_input: &'e serde_json::Value,
    pub depth: i64,
    /// The call in the canonical vocabulary (`tool_kind`, `tool`); `None` without a tool.
    pub facts: Option<&'e crate::tool::ToolFacts>,
}

impl<'e> Bindings<'e> {
    /// Bindings without tool facts (`tool_kind` is `""`, every `tool` key empty).
    pub fn new(tool_name: &'e str, tool_input: &'e serde_json::Value, depth: i64) -> Self {
        Bindings {
            tool_name,
            tool_input,
            depth,
            facts: None,
        }
    }
}

/// CEL values converted from one event's [`Bindings`], each at most once per event and
/// only when an expression reads it: `tool_input` as the projections onto the field sets
/// that expressions read (or whole, for one that reads it whole). Create one per event
/// (`Default`) and [`EvalScope::reset`] it when `tool_input` changes.
#[derive(Debug, Default)]
pub struct EvalScope {
    tool_name: Option<Box<dyn Val>>,
    depth: Option<Box<dyn Val>>,
    tool_kind: Option<Box<dyn Val>>,
    tool: Option<Box<dyn Val>>,
    whole: Option<Box<dyn Val>>,
    /// One map per distinct field set, holding those of its fields the input has.
    projections: Vec<Projection>,
}

/// `tool_input` projected onto a field set: the set, and the map of those of its fields
/// the input has.
type Projection = (Arc<[String]>, Box<dyn Val>);

impl EvalScope {
    /// Forgets every converted value (after `tool_input` was rewritten).
    pub fn reset(&mut self) {
        *self = EvalScope::default();
    }

    fn prepare(&mut self, reads: &Reads, b: &Bindings<'_>) -> Result<(), String> {
        if reads.tool_name && self.tool_name.is_none() {
            self.tool_name = Some(to_val(Value::from(b.tool_name.to_string()))?);
        }
        if reads.depth && self.depth.is_none() {
            self.depth = Some(to_val(Value::Int(b.depth))?);
        }
        if reads.tool_kind && self.tool_kind.is_none() {
            let kind = b.facts.map_or("", |f| f.kind.as_str());
            self.tool_kind = Some(to_val(Value::from(kind.to_string()))?);
        }
        if reads.tool && self.tool.is_none() {
            let none = crate::tool::ToolFacts::none();
            let tool = serde_json::to_value(b.facts.unwrap_or(&none))
                .map_err(|e| format!("tool facts: {e}"))?;
            self.tool = Some(to_val(json_to_cel(&tool))?);
        }
        match (&reads.tool_input, b.tool_input) {
            (InputReads::Nothing, _) => {}
            (InputReads::Fields(fields), serde_json::Value::Object(o)) => {
                if !self.projections.iter().any(|(f, _)| f == fields) {
                    let map: HashMap<String, Value> = fields
                        .iter()
                        .filter_map(|k| o.get(k).map(|v| (k.clone(), json_to_cel(v))))
                        .collect();
                    self.projections
                        .push((Arc::clone(fields), to_val(Value::from(map))?));
                }
            }
            // Not an object: no projection, the value as it is (map access fails).
            (InputReads::Fields(_) | InputReads::Whole, input) => {
                if self.whole.is_none() {
                    self.whole = Some(to_val(json_to_cel(input))?);
                }
            }
        }
        Ok(())
    }

    /// The prepared values `reads` needs.
    fn vars(&self, reads: &Reads) -> Vars<'_> {
        let input = match &reads.tool_input {
            InputReads::Nothing => None,
            InputReads::Fields(fields) => self
                .projections
                .iter()
                .find(|(f, _)| f == fields)
                .map(|(_, v)| v)
                .or(self.whole.as_ref()),
            InputReads::Whole => self.whole.as_ref(),
        };
        Vars {
            tool_name: self.tool_name.as_deref().filter(|_| reads.tool_name),
            tool_input: input.map(|v| &**v),
            depth: self.depth.as_deref().filter(|_| reads.depth),
            tool_kind: self.tool_kind.as_deref().filter(|_| reads.tool_kind),
            tool: self.tool.as_deref().filter(|_| reads.tool),
        }
    }
}

/// The variables of one evaluation, lent to the CEL context (no copy per hook).
struct Vars<'a> {
    tool_name: Option<&'a dyn Val>,
    tool_input: Option<&'a dyn Val>,
    depth: Option<&'a dyn Val>,
    tool_kind: Option<&'a dyn Val>,
    tool: Option<&'a dyn Val>,
}

impl VariableResolver for Vars<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let v = match variable {
            "tool_name" => self.tool_name,
            "tool_input" => self.tool_input,
            "depth" => self.depth,
            "tool_kind" => self.tool_kind,
            "tool" => self.tool,
            _ => None,
        }?;
        Some(CowVal::Borrowed(v))
    }
}

fn to_val(v: Value) -> Result<Box<dyn Val>, String> {
    v.try_into()
        .map_err(|_| "ifExpr: a value of the event has no CEL form".to_string())
}

/// What `e` reads of the event's variables ([`Reads`]).
fn reads_of(e: &IdedExpr) -> Reads {
    let mut reads = Reads::default();
    let mut fields = std::collections::BTreeSet::new();
    let mut whole = false;
    walk_reads(e, &mut reads, &mut fields, &mut whole);
    reads.tool_input = if whole {
        InputReads::Whole
    } else if fields.is_empty() {
        InputReads::Nothing
    } else {
        InputReads::Fields(fields.into_iter().collect::<Vec<_>>().into())
    };
    reads
}

fn is_input(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == "tool_input")
}

fn string_literal(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

fn walk_reads(
    e: &IdedExpr,
    reads: &mut Reads,
    fields: &mut std::collections::BTreeSet<String>,
    whole: &mut bool,
) {
    let mut go = |e: &IdedExpr| walk_reads(e, reads, fields, whole);
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => match name.as_str() {
            "tool_input" => *whole = true,
            "tool_name" => reads.tool_name = true,
            "depth" => reads.depth = true,
            "tool_kind" => reads.tool_kind = true,
            "tool" => reads.tool = true,
            _ => {}
        },
        Expr::Select(s) if is_input(&s.operand) => {
            fields.insert(s.field.clone());
        }
        Expr::Select(s) => go(&s.operand),
        Expr::Call(c) => {
            let field = match (c.func_name.as_str(), c.args.as_slice()) {
                ("_[_]", [map, key]) if is_input(map) => string_literal(key),
                ("@in", [key, map]) if is_input(map) => string_literal(key),
                _ => None,
            };
            if let (Some(f), None) = (field, &c.target) {
                fields.insert(f.to_string());
                return;
            }
            if let Some(t) = &c.target {
                go(t);
            }
            c.args.iter().for_each(go);
        }
        Expr::List(l) => l.elements.iter().for_each(go),
        Expr::Map(m) => m
            .entries
            .iter()
            .for_each(|en| walk_entry(en, reads, fields, whole)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .for_each(|en| walk_entry(en, reads, fields, whole)),
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                go(part);
            }
        }
    }
}

fn walk_entry(
    e: &cel::common::ast::IdedEntryExpr,
    reads: &mut Reads,
    fields: &mut std::collections::BTreeSet<String>,
    whole: &mut bool,
) {
    match &e.expr {
        EntryExpr::MapEntry(m) => {
            walk_reads(&m.key, reads, fields, whole);
            walk_reads(&m.value, reads, fields, whole);
        }
        EntryExpr::StructField(f) => walk_reads(&f.value, reads, fields, whole),
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

/// A hook's `matcher`: a pattern [`compile_regex`] accepted, compiled again on its first
/// use and kept from then on.
///
/// A compiled `regex::Regex` costs about 10 KiB even for `^name$` (its automata and
/// match caches); its text costs tens of bytes. A dispatcher tests most matchers of a
/// long hook list through the list's one `RegexSet` and never through the hook's own
/// regex, so 10,000 hooks with distinct patterns would hold 100 MiB of regexes nobody
/// runs (issue 15).
#[derive(Debug)]
pub struct LazyRegex {
    pattern: String,
    compiled: std::sync::OnceLock<regex::Regex>,
    exact: std::sync::OnceLock<Option<Box<[String]>>>,
}

impl LazyRegex {
    /// Validates `pattern` by compiling it ([`compile_regex`], the compiled form
    /// dropped); the error is `compile_regex`'s.
    pub fn new(pattern: &str) -> Result<LazyRegex, String> {
        compile_regex(pattern)?;
        Ok(LazyRegex {
            pattern: pattern.to_string(),
            compiled: std::sync::OnceLock::new(),
            exact: std::sync::OnceLock::new(),
        })
    }

    /// The names this pattern matches when it matches whole names only and nothing else
    /// (`^Bash$`, `^(Write|Edit)$`, `\AEdit\z`): `is_match(t)` is then exactly "`t` is one
    /// of them", so an index may look them up instead of running the regex. `None` for
    /// any other pattern (a class, a repetition, a flag, an unanchored end). Worked out
    /// once per pattern.
    pub fn exact_names(&self) -> Option<&[String]> {
        self.exact
            .get_or_init(|| exact_names(&self.pattern).map(Vec::into_boxed_slice))
            .as_deref()
    }

    /// The pattern's text.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The compiled regex, compiled now if this is its first use.
    pub fn regex(&self) -> &regex::Regex {
        self.compiled.get_or_init(|| {
            // `new` compiled the same text with the same settings: it compiles again.
            compile_regex(&self.pattern).expect("a validated pattern compiles")
        })
    }

    /// Whether the pattern matches somewhere in `text` (unanchored, as `regex`).
    pub fn is_match(&self, text: &str) -> bool {
        self.regex().is_match(text)
    }

    /// Whether the regex has been compiled since validation.
    pub fn is_compiled(&self) -> bool {
        self.compiled.get().is_some()
    }
}

/// See [`LazyRegex::exact_names`].
fn exact_names(pattern: &str) -> Option<Vec<String>> {
    use regex_syntax::hir::{HirKind, Look};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let [start, body, end] = parts.as_slice() else {
        return None;
    };
    if !matches!(start.kind(), HirKind::Look(Look::Start))
        || !matches!(end.kind(), HirKind::Look(Look::End))
    {
        return None;
    }
    let literal = |h: &regex_syntax::hir::Hir| match h.kind() {
        HirKind::Literal(l) => std::str::from_utf8(&l.0).ok().map(str::to_owned),
        _ => None,
    };
    let body = match body.kind() {
        HirKind::Capture(c) => c.sub.as_ref(),
        _ => body,
    };
    match body.kind() {
        HirKind::Literal(_) => Some(vec![literal(body)?]),
        HirKind::Alternation(alts) => alts.iter().map(literal).collect(),
        _ => None,
    }
}

/// A [`LazyRegex`], shared with every other hook whose pattern is the same text
/// ([`crate::interned`]): a `matcher` is validated and compiled once per distinct
/// pattern.
pub fn shared_regex(pattern: &str) -> Result<Arc<LazyRegex>, String> {
    static SHARED: LazyLock<crate::interned::Interned<LazyRegex>> = LazyLock::new(Default::default);
    SHARED.get_or_try_insert(pattern, LazyRegex::new)
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

/// What an expression's root obviously produces when that is not a boolean (arithmetic,
/// a non-boolean literal, a list or a map); `None` when it may be boolean.
fn non_boolean_root(e: &IdedExpr) -> Option<&'static str> {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => None,
        Expr::Literal(_) => Some("a literal value"),
        Expr::List(_) => Some("a list"),
        Expr::Map(_) | Expr::Struct(_) => Some("a map"),
        Expr::Call(c)
            if matches!(
                c.func_name.as_str(),
                "_+_" | "_-_" | "_*_" | "_/_" | "_%_" | "-_"
            ) =>
        {
            Some("arithmetic")
        }
        Expr::Call(c)
            if matches!(
                c.func_name.as_str(),
                "size" | "int" | "uint" | "double" | "string" | "bytes"
            ) =>
        {
            Some("a conversion or size")
        }
        _ => None,
    }
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

/// Static cost of an expression: `cost` in steps, `size` the worst-case length of the
/// value it produces (list or map entries, string characters) in units of
/// [`MAX_LIST_LEN`] for anything that comes from the input.
#[derive(Clone, Copy)]
struct Est {
    cost: u64,
    size: u64,
}

/// Functions whose work grows with the size of their operands (string scans, deep
/// equality, membership, conversions).
const LINEAR: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "string",
    "bytes",
    "_==_",
    "_!=_",
    "@in",
];

struct Checker {
    /// Variables bound by enclosing comprehensions, with the size of what they hold.
    bound: Vec<(String, u64)>,
    /// Literal `matches()` patterns to compile.
    patterns: Vec<String>,
}

impl Checker {
    fn cost(&mut self, e: &IdedExpr, level: usize) -> Result<u64, ExprError> {
        self.est(e, level).map(|e| e.cost)
    }

    fn est(&mut self, e: &IdedExpr, level: usize) -> Result<Est, ExprError> {
        if level > MAX_NESTING * 4 {
            return Err(ExprError::TooDeep);
        }
        let next = level + 1;
        Ok(match &e.expr {
            Expr::Unspecified => Est { cost: 1, size: 1 },
            Expr::Literal(LiteralValue::String(s)) => Est {
                cost: 1,
                size: s.inner().chars().count() as u64,
            },
            Expr::Literal(_) => Est { cost: 1, size: 1 },
            Expr::Ident(name) => {
                let size = match name.as_str() {
                    "depth" => 1,
                    "tool_name" | "tool_input" | "tool_kind" | "tool" => MAX_LIST_LEN,
                    other => match self.bound.iter().rev().find(|(b, _)| b == other) {
                        Some((_, size)) => *size,
                        None => return Err(ExprError::UnknownVariable(name.clone())),
                    },
                };
                Est { cost: 1, size }
            }
            // A selected field is no larger than what it is selected from.
            Expr::Select(s) => {
                let operand = self.est(&s.operand, next)?;
                Est {
                    cost: operand.cost.saturating_add(1),
                    size: operand.size,
                }
            }
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
                let mut parts = Vec::with_capacity(call.args.len() + 1);
                if let Some(t) = &call.target {
                    parts.push(self.est(t, next)?);
                }
                for a in &call.args {
                    parts.push(self.est(a, next)?);
                }
                let mut cost = parts.iter().fold(1u64, |c, p| c.saturating_add(p.cost));
                let total_size = parts.iter().fold(0u64, |c, p| c.saturating_add(p.size));
                let size = match name {
                    // list or string concatenation copies both sides
                    "_+_" => {
                        cost = cost.saturating_add(total_size);
                        total_size
                    }
                    // an element is no larger than its container
                    "_[_]" => parts.first().map_or(1, |p| p.size),
                    _ if LINEAR.contains(&name) => {
                        cost = cost.saturating_add(total_size);
                        1
                    }
                    "_?_:_" => parts.iter().skip(1).map(|p| p.size).max().unwrap_or(1),
                    _ => 1,
                };
                Est { cost, size }
            }
            Expr::List(l) => {
                let mut cost = 1u64;
                for el in &l.elements {
                    cost = cost.saturating_add(self.cost(el, next)?);
                }
                Est {
                    cost,
                    size: l.elements.len() as u64,
                }
            }
            Expr::Map(m) => Est {
                cost: self.entries(&m.entries, next)?,
                size: m.entries.len() as u64,
            },
            Expr::Struct(s) => Est {
                cost: self.entries(&s.entries, next)?,
                size: s.entries.len() as u64,
            },
            Expr::Comprehension(c) => {
                let range = self.est(&c.iter_range, next)?;
                let n = range.size.max(1);
                // The items of a range taken from the input share the input's caps, so
                // one item's share is the cap over the count; literal lists hold literals.
                let item = match &c.iter_range.expr {
                    Expr::List(_) | Expr::Map(_) => 1,
                    _ => (MAX_LIST_LEN / n).max(1),
                };
                let init = self.est(&c.accu_init, next)?;
                let depth = self.bound.len();
                // The accumulator of map/filter grows to the range's size.
                self.bound.push((c.accu_var.clone(), n.max(init.size)));
                self.bound.push((c.iter_var.clone(), item));
                if let Some(v2) = &c.iter_var2 {
                    self.bound.push((v2.clone(), item));
                }
                let body = self
                    .cost(&c.loop_cond, next)?
                    .saturating_add(self.cost(&c.loop_step, next)?);
                let result = self.est(&c.result, next)?;
                self.bound.truncate(depth);
                Est {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(n.saturating_mul(body))
                        .saturating_add(result.cost),
                    size: result.size,
                }
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
        e.evaluate(
            &Bindings::new(tool_name, &input, depth),
            &mut EvalScope::default(),
        )
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
        let err = eval("depth > 0 ? 1 : 2", "t", json!({}), 0).unwrap_err();
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
    fn only_the_five_variables_exist() {
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
    fn tool_kind_and_tool_hold_the_canonical_call() {
        use crate::tool::{ToolHints, classify};
        let e =
            IfExpr::compile(r#"tool_kind == "shell" && tool.command.contains("rm -rf")"#).unwrap();
        for (name, key) in [
            ("Bash", "command"),
            ("run_shell_command", "command"),
            ("exec", "cmd"),
        ] {
            let input = json!({key: "rm -rf /data"});
            let facts = classify(name, &input, &ToolHints::default());
            let scope = Bindings {
                tool_name: name,
                tool_input: &input,
                depth: 0,
                facts: Some(&facts),
            };
            assert_eq!(
                e.evaluate(&scope, &mut EvalScope::default()),
                Ok(true),
                "{name}"
            );
        }
        // Without a tool: `tool_kind` is "" and every `tool` key is there, empty.
        let scope = Bindings {
            tool_name: "",
            tool_input: &json!({}),
            depth: 0,
            facts: None,
        };
        assert_eq!(e.evaluate(&scope, &mut EvalScope::default()), Ok(false));
        let e =
            IfExpr::compile(r#"tool_kind == "" && size(tool.paths) == 0 && tool.mcp_server == """#)
                .unwrap();
        assert_eq!(e.evaluate(&scope, &mut EvalScope::default()), Ok(true));
        // The plain constructor knows no tool.
        assert_eq!(
            e.evaluate(
                &Bindings::new("Bash", &json!({}), 0),
                &mut EvalScope::default()
            ),
            Ok(true)
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
        let input = json!({"command": "git  push origin"});
        let scope = Bindings::new("Bash", &input, 0);
        assert_eq!(e.evaluate(&scope, &mut EvalScope::default()), Ok(true));
        let input = json!({"command": "git pull"});
        let scope = Bindings::new("Bash", &input, 0);
        assert_eq!(e.evaluate(&scope, &mut EvalScope::default()), Ok(false));
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
        let input = json!({"items": items});
        let scope = Bindings::new("t", &input, 0);
        let started = std::time::Instant::now();
        assert_eq!(e.evaluate(&scope, &mut EvalScope::default()), Ok(true));
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[test]
    fn concatenation_and_membership_are_charged_by_size() {
        // A tester's DoS: the list joined to itself, scanned with `in` for every item.
        let joined = ["tool_input.a"; 8].join(" + ");
        let src = format!("({joined}).all(x, !((\"z\" + x) in ({joined})))");
        assert!(
            matches!(IfExpr::compile(&src), Err(ExprError::TooCostly(_))),
            "{src}"
        );
        // membership over the input inside a loop over the input is quadratic: refused
        assert!(matches!(
            IfExpr::compile("tool_input.a.all(x, x in tool_input.b)"),
            Err(ExprError::TooCostly(_))
        ));
        // map over the input grows its accumulator each step: quadratic, refused
        assert!(matches!(
            IfExpr::compile("size(tool_input.a.map(x, x)) > 0"),
            Err(ExprError::TooCostly(_))
        ));
        // linear scans are fine
        assert!(IfExpr::compile("'rm' in tool_input && tool_input.cmd.contains('-rf')").is_ok());
        assert!(IfExpr::compile("tool_input.a.exists(x, x == 'rm')").is_ok());
    }

    #[test]
    fn the_most_costly_accepted_expressions_stay_fast_at_the_input_caps() {
        let items: Vec<_> = (0..MAX_LIST_LEN)
            .map(|i| json!(format!("item-{i}-{}", "x".repeat(100))))
            .collect();
        let input = json!({"a": items, "cmd": "y".repeat(100_000)});
        let scope = Bindings::new("exec", &input, 0);
        for src in [
            "tool_input.a.all(x, x.size() < 1000 && x.startsWith('item') && !x.contains('zz'))",
            "tool_input.a.exists(x, x.matches('^never$'))",
            "tool_input.cmd.contains('rm -rf') || tool_input.cmd.size() > 10",
        ] {
            let e = IfExpr::compile(src).unwrap();
            assert!(e.cost() <= MAX_COST, "{src}");
            let started = std::time::Instant::now();
            let _ = e.evaluate(&scope, &mut EvalScope::default());
            assert!(
                started.elapsed() < std::time::Duration::from_secs(1),
                "{src}: {:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn obviously_non_boolean_expressions_are_refused() {
        for src in [
            "depth + 1",
            "'text'",
            "[1, 2]",
            "{'a': 1}",
            "size(tool_input)",
            "42",
        ] {
            assert!(
                matches!(IfExpr::compile(src), Err(ExprError::NotBoolean(_))),
                "{src}"
            );
        }
        assert!(IfExpr::compile("depth + 1 > 2").is_ok());
        assert_eq!(
            IfExpr::compile("max(1, 2) == 2").unwrap_err(),
            ExprError::UnknownFunction("max".into())
        );
    }

    #[test]
    fn regex_size_limit_refuses_huge_programs() {
        assert!(compile_regex("a{1000}{1000}").is_err());
        assert!(compile_regex("^(exec|shell)$").is_ok());
    }

    fn fields(names: &[&str]) -> InputReads {
        InputReads::Fields(
            names
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into(),
        )
    }

    #[test]
    fn reads_name_the_variables_and_the_fields_of_tool_input_an_expression_uses() {
        let r = |src: &str| IfExpr::compile(src).unwrap().reads().clone();
        let e =
            r(r#"tool_name == "exec" && tool_input.cmd.startsWith("rm") && has(tool_input.cwd)"#);
        assert!(e.tool_name && !e.depth && !e.tool && !e.tool_kind);
        assert_eq!(e.tool_input, fields(&["cmd", "cwd"]));
        assert_eq!(
            r(r#"tool_input["b"] == "x" && "a" in tool_input"#).tool_input,
            fields(&["a", "b"])
        );
        assert_eq!(r("depth > 2").tool_input, InputReads::Nothing);
        assert!(r("depth > 2").depth);
        assert!(r(r#"tool_kind == "shell" && tool.command != """#).tool);
        for whole in [
            "size(tool_input) > 2",
            "tool_input.exists(k, k == 'x')",
            "tool_input == {'a': 1}",
            "'a' + 'b' in tool_input",
            "tool_input[tool_name] == 'x'",
            // a comprehension variable named tool_input: bare uses count, conservatively
            "[1, 2].exists(tool_input, tool_input == 2) && has(tool_input.cmd)",
        ] {
            assert_eq!(r(whole).tool_input, InputReads::Whole, "{whole}");
        }
    }

    /// A projection onto the fields an expression reads answers as the whole input does.
    #[test]
    fn projected_input_evaluates_as_the_whole_input() {
        let inputs = [
            json!({"cmd": "rm -rf /", "cwd": "/tmp", "big": "x".repeat(10_000), "n": 3}),
            json!({"cmd": "ls"}),
            json!({"other": {"cmd": "rm"}}),
            json!({}),
            json!({"cmd": 5, "cwd": null}),
            json!(["cmd"]),
            json!("cmd"),
        ];
        let exprs = [
            r#"tool_input.cmd.startsWith("rm")"#,
            r#"has(tool_input.cmd) && tool_input.cmd == "ls""#,
            r#"has(tool_input.cwd)"#,
            r#""cmd" in tool_input"#,
            r#"!("cwd" in tool_input) || tool_input["cwd"] == null"#,
            r#"tool_input.n + 1 == 4"#,
            r#"tool_input.cmd.contains("rm") || tool_name == "x""#,
        ];
        for src in exprs {
            let projected = IfExpr::compile(src).unwrap();
            assert!(
                matches!(projected.reads().tool_input, InputReads::Fields(_)),
                "{src}"
            );
            let mut whole = IfExpr::compile(src).unwrap();
            whole.reads.tool_input = InputReads::Whole;
            let mut shared = EvalScope::default();
            for input in &inputs {
                let b = Bindings::new("exec", input, 0);
                let want = whole.evaluate(&b, &mut EvalScope::default());
                assert_eq!(
                    projected.evaluate(&b, &mut EvalScope::default()),
                    want,
                    "{src} on {input}"
                );
                // A scope shared across the expressions of one event gives the same.
                assert_eq!(
                    projected.evaluate(&b, &mut shared),
                    want,
                    "{src} on {input}"
                );
                shared.reset();
            }
        }
    }

    #[test]
    fn one_scope_serves_expressions_reading_different_parts() {
        let input = json!({"cmd": "rm -rf /", "path": "/etc", "big": "y".repeat(1_000)});
        let b = Bindings::new("exec", &input, 1);
        let mut scope = EvalScope::default();
        for (src, want) in [
            (r#"tool_input.cmd.startsWith("rm")"#, true),
            (r#"tool_input.path == "/etc" && depth == 1"#, true),
            (r#"size(tool_input) == 3"#, true),
            (r#"tool_input.cmd == "ls""#, false),
            (r#"tool_name == "exec""#, true),
        ] {
            assert_eq!(
                IfExpr::compile(src).unwrap().interpret(&b, &mut scope),
                Ok(want),
                "{src}"
            );
        }
        assert_eq!(
            scope.projections.len(),
            2,
            "one projection per distinct field set"
        );
        assert!(scope.whole.is_some());
    }

    #[test]
    fn shared_expressions_and_patterns_are_compiled_once_per_text() {
        let a = IfExpr::shared("tool_input.cmd == 'a-shared-test'").unwrap();
        let b = IfExpr::shared("tool_input.cmd == 'a-shared-test'").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(IfExpr::shared("tool_input.cmd ==").is_err());
        let c = shared_regex("^shared-test$").unwrap();
        let d = shared_regex("^shared-test$").unwrap();
        assert!(Arc::ptr_eq(&c, &d));
        assert!(shared_regex("(").is_err());
    }

    #[test]
    fn a_matcher_is_compiled_on_its_first_use_only() {
        let m = LazyRegex::new("^lazy-(a|b)$").unwrap();
        assert_eq!(m.as_str(), "^lazy-(a|b)$");
        assert!(!m.is_compiled(), "validation keeps no compiled form");
        assert!(m.is_match("lazy-b"));
        assert!(!m.is_match("lazy-c"));
        assert!(m.is_compiled());
        // The refusals are compile_regex's.
        assert_eq!(
            LazyRegex::new("a{1000}{1000}").unwrap_err(),
            compile_regex("a{1000}{1000}").unwrap_err()
        );
        assert!(LazyRegex::new("(").is_err());
    }
}

#[cfg(test)]
mod exact_name_tests {
    use super::*;

    #[test]
    fn whole_name_patterns_give_their_names_and_others_none() {
        let names = |p: &str| LazyRegex::new(p).unwrap().exact_names().map(|n| n.to_vec());
        assert_eq!(names("^Bash$"), Some(vec!["Bash".to_string()]));
        assert_eq!(
            names(r"\Amcp__fs__read\z"),
            Some(vec!["mcp__fs__read".to_string()])
        );
        assert_eq!(names("^bulk-17$"), Some(vec!["bulk-17".to_string()]));
        assert_eq!(
            names("^(Write|Edit|MultiEdit)$"),
            Some(vec!["Write".into(), "Edit".into(), "MultiEdit".into()])
        );
        for p in [
            "Bash",
            "^Bash",
            "Bash$",
            "^Ba.h$",
            "^(?i)bash$",
            "^Bash|Read$",
            "^Bash+$",
            "^[AB]$",
            "^(?m)Bash$",
            ".*",
            "^mcp__.*$",
        ] {
            assert_eq!(names(p), None, "{p}");
        }
    }

    #[test]
    fn a_name_is_exact_exactly_when_the_regex_matches_it() {
        let tools = [
            "Bash",
            "bash",
            "xBash",
            "Bashx",
            "Write",
            "Edit",
            "MultiEdit",
            "Edit2",
            "",
            "mcp__fs__read",
            "bulk-17",
            "bulk-170",
        ];
        for p in [
            "^Bash$",
            "^(Write|Edit|MultiEdit)$",
            r"\Amcp__fs__read\z",
            "^bulk-17$",
            "^(Edit)$",
        ] {
            let re = LazyRegex::new(p).unwrap();
            let names = re
                .exact_names()
                .unwrap_or_else(|| panic!("{p} names names"));
            for t in tools {
                assert_eq!(names.iter().any(|n| n == t), re.is_match(t), "{p} on {t:?}");
            }
        }
    }
}
