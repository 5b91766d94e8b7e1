//! The `hook_executions` table in SQLite or PostgreSQL (CONTRACT §7; issue 5 points 1
//! and 2): connect (running the versioned sqlx migrations), batch inserts deduplicated by
//! `dedup_key`, and the history queries behind `GET /v1/executions[/{id}]`.
//!
//! - SQLite (`sqlite://PATH`, the standalone default): the file is created if missing, WAL
//!   journal (a reader never waits for the writer), `synchronous=FULL`, 5 s busy timeout.
//! - PostgreSQL (`postgres://...`, for many replicas): a pool of up to 8 connections, 5 s
//!   acquire timeout; TLS with rustls and the webpki roots when the URL asks for it
//!   (`?sslmode=require`).
//!
//! Migrations live in `dispatcher/migrations/{sqlite,postgres}/` and are compiled in; every
//! [`AuditStore::connect`] runs the missing ones (running them again is a no-op; on
//! PostgreSQL sqlx takes an advisory lock, so replicas starting together do not race).
//!
//! Paging (issue 5 point 2): newest first is highest `id` first; a page's
//! [`ExecutionPage::next_cursor`] names its last id and the next page holds `id <` it, so
//! rows inserted meanwhile never shift a page. Timestamps are stored with microsecond
//! precision (finer digits are cut).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use super::error_detail::SealedDetail;
use super::row::{AuditRow, parse_decision};
use crate::decision::outcome::Outcome;
use agenthooks_crds::event::HookEvent;

pub mod cursor;
mod postgres;
mod sqlite;

pub use cursor::Cursor;

/// Default page size of `GET /v1/executions` (issue 5 point 2).
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size of `GET /v1/executions`.
pub const MAX_LIMIT: u32 = 500;

/// Columns read back, in the order [`RawRow`] expects them.
const SELECT_COLUMNS: &str = "id, hook_uid, hook_namespace, hook_name, tenant, session_id, \
     event, input_hash, decision, duration_ms, dedup_key, error, error_detail, \
     error_detail_key_id, metadata, created_at";

/// Columns written by an insert (all but `id`), in bind order.
const INSERT_COLUMNS: &str = "hook_uid, hook_namespace, hook_name, tenant, session_id, event, \
     input_hash, decision, duration_ms, dedup_key, error, error_detail, error_detail_key_id, \
     metadata, created_at";

/// A history query parameter that breaks its rule. Shown as `<field>: <message>`; `field`
/// is the query parameter's name (`namespace`, `hook`, `decision`, `since`, `limit`,
/// `cursor`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct QueryError {
    /// The query parameter at fault.
    pub field: &'static str,
    /// What is wrong and what is expected.
    pub message: String,
}

impl QueryError {
    /// A new error for `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> QueryError {
        QueryError {
            field,
            message: message.into(),
        }
    }
}

/// Errors of the audit store. Messages never carry a database password.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The `--audit-db` URL is neither `sqlite:` nor `postgres://`/`postgresql://`, or the
    /// driver refuses its options.
    #[error("audit database URL {url}: {message}")]
    BadUrl {
        /// The URL with any password replaced by `***`.
        url: String,
        /// The rule it breaks.
        message: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot connect to the {backend} audit database {url}: {source}")]
    Connect {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The URL with any password replaced by `***`.
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// A versioned migration failed (or the database holds migrations this build does not
    /// know, e.g. after a downgrade).
    #[error("{backend} audit database migrations failed: {source}")]
    Migrate {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A history query parameter is invalid (limit, cursor...).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A statement failed (connection lost, database down, disk full...).
    #[error("{backend} audit database: {op} failed: {source}")]
    Database {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// What was being done (`insert_batch`, `list`, `get`, `count`).
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// A stored row does not read back as an [`AuditRow`] (written by another version or by
    /// hand).
    #[error("hook_executions row {id}: column {column}: {message}")]
    Corrupt {
        /// The row's id.
        id: i64,
        /// The column at fault.
        column: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl StoreError {
    /// Whether trying the same operation again later may succeed (the database was
    /// unreachable or failed a statement), as opposed to a bad URL, query or row.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Connect { .. } | StoreError::Database { .. }
        )
    }
}

/// `hook=NS/NAME`: the AgentHook whose rows to list. Matches rows by namespace and name,
/// so rows of a deleted (or re-created) hook stay findable (issue 5 point 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRef {
    /// `metadata.namespace` of the AgentHook.
    pub namespace: String,
    /// `metadata.name` of the AgentHook.
    pub name: String,
}

impl HookRef {
    /// Parses `NAMESPACE/NAME` (both non-empty, one `/`). Errors name the field `hook`.
    pub fn parse(s: &str) -> Result<HookRef, QueryError> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(HookRef {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(QueryError::new(
                "hook",
                format!("expected NAMESPACE/NAME, got {s:?}"),
            )),
        }
    }
}

impl std::fmt::Display for HookRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The raw query parameters of `GET /v1/executions` (each optional, as strings), e.g.
/// deserialized by axum's `Query`. [`ExecutionQuery::from_params`] checks them. The API
/// schema (`JsonSchema`) states the values they must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub struct ExecutionParams {
    /// A namespace name (1 to 63 lowercase letters, digits and `-`, starting and ending
    /// with a letter or digit): only rows of its hooks. With `hook`, its namespace.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"))]
    pub namespace: Option<String>,
    /// `NAMESPACE/NAME`: only rows of that hook (also of a deleted one).
    #[schemars(regex(pattern = r"^[^/]+/[^/]+$"))]
    pub hook: Option<String>,
    /// Only rows whose hook came to this: `allow|block|error|timeout`.
    #[schemars(with = "Option<Outcome>")]
    pub decision: Option<String>,
    /// RFC 3339 time (`2026-11-30T06:00:00Z`): rows created at or after it.
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[schemars(with = "Option<u32>", range(min = 1, max = 500))]
    pub limit: Option<String>,
    /// `nextCursor` of the previous page: the page of older rows.
    pub cursor: Option<String>,
}

/// One history query (issue 5 point 2): filters (all optional, combined with AND), page
/// size and where the page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// Only rows of hooks in this namespace (`hook_namespace`). With [`Self::hook`] too,
    /// both name the same namespace ([`ExecutionQuery::validate`]).
    pub namespace: Option<String>,
    /// Only rows of this hook (by namespace/name).
    pub hook: Option<HookRef>,
    /// Only rows with this decision.
    pub decision: Option<Outcome>,
    /// Only rows with `created_at >= since`.
    pub since: Option<DateTime<Utc>>,
    /// Page size, 1..=[`MAX_LIMIT`] (default [`DEFAULT_LIMIT`]). [`AuditStore::list`]
    /// refuses anything else.
    pub limit: u32,
    /// Start after this cursor; `None` for the newest rows.
    pub cursor: Option<Cursor>,
}

impl Default for ExecutionQuery {
    fn default() -> Self {
        ExecutionQuery {
            namespace: None,
            hook: None,
            decision: None,
            since: None,
            limit: DEFAULT_LIMIT,
            cursor: None,
        }
    }
}

impl ExecutionQuery {
    /// Checks the query's rules: `limit` in 1..=500; `namespace` a namespace name, and
    /// the one of `hook` when both are given. Errors name the field.
    pub fn validate(&self) -> Result<(), QueryError> {
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(QueryError::new(
                "limit",
                format!("must be from 1 to {MAX_LIMIT}, got {}", self.limit),
            ));
        }
        if let Some(ns) = &self.namespace {
            if !is_namespace_name(ns) {
                let shown: String = ns.chars().take(64).collect();
                return Err(QueryError::new(
                    "namespace",
                    format!(
                        "expected a namespace name (1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit), got {shown:?}"
                    ),
                ));
            }
            if let Some(hook) = self.hook.as_ref().filter(|h| h.namespace != *ns) {
                return Err(QueryError::new(
                    "namespace",
                    format!(
                        "{ns} is not the namespace of hook={hook}: give one of them, or the same namespace in both"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The one namespace whose rows the query reads: `namespace`, else the namespace of
    /// `hook` (`hook=NS/NAME` implies `NS`); `None` for every namespace.
    pub fn scope(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .or(self.hook.as_ref().map(|h| h.namespace.as_str()))
    }

    /// Builds and validates a query from the raw `GET /v1/executions` parameters. Each
    /// error names its parameter: `namespace` (a namespace name, the same as `hook`'s when
    /// both are given), `hook` (NAMESPACE/NAME), `decision`
    /// (allow|block|error|timeout), `since` (RFC 3339, e.g. `2026-11-30T06:00:00Z`),
    /// `limit` (integer 1..=500), `cursor` (as returned in `next_cursor`).
    pub fn from_params(p: &ExecutionParams) -> Result<ExecutionQuery, QueryError> {
        let hook = p.hook.as_deref().map(HookRef::parse).transpose()?;
        let decision = p
            .decision
            .as_deref()
            .map(|d| {
                parse_decision(d).map_err(|_| {
                    QueryError::new(
                        "decision",
                        format!("expected allow, block, error or timeout, got {d:?}"),
                    )
                })
            })
            .transpose()?;
        let since = p
            .since
            .as_deref()
            .map(|s| {
                DateTime::parse_from_rfc3339(s)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| {
                        QueryError::new(
                            "since",
                            format!(
                                "expected an RFC 3339 time like 2026-11-30T06:00:00Z, got {s:?} ({e})"
                            ),
                        )
                    })
            })
            .transpose()?;
        let limit = match p.limit.as_deref() {
            None => DEFAULT_LIMIT,
            Some(l) => l.parse::<u32>().map_err(|_| {
                QueryError::new(
                    "limit",
                    format!("must be an integer from 1 to {MAX_LIMIT}, got {l:?}"),
                )
            })?,
        };
        let cursor = p.cursor.as_deref().map(Cursor::parse).transpose()?;
        let q = ExecutionQuery {
            namespace: p.namespace.clone(),
            hook,
            decision,
            since,
            limit,
            cursor,
        };
        q.validate()?;
        Ok(q)
    }
}

/// One page of history, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionPage {
    /// At most `limit` rows, each with `id: Some(..)`, highest id first.
    pub rows: Vec<AuditRow>,
    /// The cursor of the next (older) page; `None` when this page is the last.
    pub next_cursor: Option<String>,
}

impl ExecutionPage {
    /// Builds a page from up to `limit + 1` rows fetched newest first: the extra row only
    /// tells that another page exists.
    fn from_fetched(mut rows: Vec<AuditRow>, limit: u32) -> ExecutionPage {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = if more {
            rows.last()
                .and_then(|r| r.id)
                .and_then(Cursor::after_row)
                .map(|c| c.encode())
        } else {
            None
        };
        ExecutionPage { rows, next_cursor }
    }
}

/// The audit database: SQLite or PostgreSQL behind a connection pool. Cheap to clone (the
/// pool is shared).
#[derive(Debug, Clone)]
pub enum AuditStore {
    /// `sqlite:` URL.
    Sqlite(sqlx::SqlitePool),
    /// `postgres://` or `postgresql://` URL.
    Postgres(sqlx::PgPool),
}

impl AuditStore {
    /// Opens the database named by `url` and runs the missing migrations.
    ///
    /// - `sqlite://PATH` or `sqlite:PATH` (relative to the working directory; `sqlite:///abs`
    ///   for an absolute path; the file is created if missing; `sqlite::memory:` for a
    ///   private in-memory database that lives as long as the store).
    /// - `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=...]` (or `postgresql://`).
    ///
    /// Errors: [`StoreError::BadUrl`], [`StoreError::Connect`], [`StoreError::Migrate`].
    pub async fn connect(url: &str) -> Result<AuditStore, StoreError> {
        let lower = url.get(..13).unwrap_or(url).to_ascii_lowercase();
        if is_sqlite_url(url) {
            sqlite::connect(url).await.map(AuditStore::Sqlite)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            postgres::connect(url).await.map(AuditStore::Postgres)
        } else {
            Err(StoreError::BadUrl {
                url: redact_url(url),
                message: "expected sqlite://PATH or postgres://USER@HOST:PORT/DB".into(),
            })
        }
    }

    /// Inserts `rows`, skipping rows whose `dedup_key` is already stored or appears
    /// earlier in `rows` (`ON CONFLICT (dedup_key) DO NOTHING`; CONTRACT §7.2) — when
    /// they are the same event: a retry, or a spool replay. `id` of the given rows is
    /// ignored. Returns how many rows were inserted. Any batch size works (SQLite:
    /// multi-row INSERTs of 500 rows in one transaction; PostgreSQL: one INSERT ...
    /// SELECT FROM UNNEST of arrays).
    ///
    /// A row whose key is taken by a *different* event (another tenant, session, event
    /// or input: the caller reused an `event_id`) is not a retry, and dropping it would
    /// let a caller keep runs out of the trail. It is stored under
    /// [`reused_event_key`] (`<dedup_key>#<16 hex>`, deterministic, so its replays stay
    /// harmless) and logged as `security.hook.event_id_reused`. Replaying a batch after
    /// an error is always safe: each step is idempotent.
    pub async fn insert_batch(&self, rows: &[AuditRow]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = self.insert_rows(rows).await?;
        if inserted as usize == rows.len() {
            return Ok(inserted);
        }
        // Some keys were taken: find which by a different event.
        let keys: Vec<&str> = rows.iter().map(|r| r.dedup_key.as_str()).collect();
        let stored = match self {
            AuditStore::Sqlite(pool) => sqlite::stored_events(pool, &keys).await?,
            AuditStore::Postgres(pool) => postgres::stored_events(pool, &keys).await?,
        };
        let stored: std::collections::HashMap<&str, &StoredEvent> =
            stored.iter().map(|e| (e.dedup_key.as_str(), e)).collect();
        let reused: Vec<AuditRow> = rows
            .iter()
            .filter(|r| {
                stored
                    .get(r.dedup_key.as_str())
                    .is_some_and(|e| !e.is_event_of(r))
            })
            .map(|r| {
                tracing::warn!(
                    target: "security.hook.event_id_reused",
                    dedup_key = %r.dedup_key, tenant = %r.tenant, session_id = %r.session_id,
                    "security.hook.event_id_reused: another event already holds this dedup key; row kept under its own key"
                );
                AuditRow {
                    dedup_key: reused_event_key(r),
                    ..r.clone()
                }
            })
            .collect();
        if reused.is_empty() {
            return Ok(inserted);
        }
        Ok(inserted + self.insert_rows(&reused).await?)
    }

    async fn insert_rows(&self, rows: &[AuditRow]) -> Result<u64, StoreError> {
        match self {
            AuditStore::Sqlite(pool) => sqlite::insert_batch(pool, rows).await,
            AuditStore::Postgres(pool) => postgres::insert_batch(pool, rows).await,
        }
    }

    /// One page of history, newest first (see [`ExecutionQuery`]). Refuses an invalid
    /// query with [`StoreError::Query`] before touching the database.
    pub async fn list(&self, q: &ExecutionQuery) -> Result<ExecutionPage, StoreError> {
        q.validate()?;
        let fetched = match self {
            AuditStore::Sqlite(pool) => sqlite::list(pool, q).await?,
            AuditStore::Postgres(pool) => postgres::list(pool, q).await?,
        };
        Ok(ExecutionPage::from_fetched(fetched, q.limit))
    }

    /// The row with this id, `None` if there is none.
    pub async fn get(&self, id: i64) -> Result<Option<AuditRow>, StoreError> {
        match self {
            AuditStore::Sqlite(pool) => sqlite::get(pool, id).await,
            AuditStore::Postgres(pool) => postgres::get(pool, id).await,
        }
    }

    /// How many rows the table holds (tests and tools: "count every row").
    pub async fn count(&self) -> Result<u64, StoreError> {
        const SQL: &str = "SELECT COUNT(*) FROM hook_executions";
        let n: i64 = match self {
            AuditStore::Sqlite(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
            AuditStore::Postgres(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
        }
        .map_err(|source| StoreError::Database {
            backend: self.backend(),
            op: "count",
            source,
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// `"sqlite"` or `"postgres"` (logs, metrics labels).
    pub fn backend(&self) -> &'static str {
        match self {
            AuditStore::Sqlite(_) => sqlite::BACKEND,
            AuditStore::Postgres(_) => postgres::BACKEND,
        }
    }

    /// Closes the pool, waiting for connections in use to be returned (shutdown).
    pub async fn close(&self) {
        match self {
            AuditStore::Sqlite(pool) => pool.close().await,
            AuditStore::Postgres(pool) => pool.close().await,
        }
    }
}

/// What makes a row the same event as a stored one with its `dedup_key`: a retry
/// repeats tenant, session, event and input (the decision may differ, e.g. a timeout
/// then an allow).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StoredEvent {
    dedup_key: String,
    tenant: String,
    session_id: String,
    event: String,
    input_hash: String,
}

impl StoredEvent {
    fn is_event_of(&self, r: &AuditRow) -> bool {
        self.tenant == r.tenant
            && self.session_id == r.session_id
            && self.event == r.event.as_str()
            && self.input_hash == r.input_hash
    }
}

/// The `dedup_key` of a row whose `<hook uid>:<event_id>` is held by a different event:
/// `<dedup_key>#<first 16 hex of sha256(tenant \0 session_id \0 event \0 input_hash)>`.
/// The same run always gets the same key, so replays of it are still skipped.
pub fn reused_event_key(r: &AuditRow) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [
        r.tenant.as_str(),
        r.session_id.as_str(),
        r.event.as_str(),
        r.input_hash.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = hex::encode(h.finalize());
    format!("{}#{}", r.dedup_key, &digest[..16])
}

/// Whether `url` names a SQLite database (`sqlite:`, any case): the one test that
/// picks the backend ([`AuditStore::connect`]), its name and the default spool directory.
pub fn is_sqlite_url(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:"))
}

/// `url` with the password (if any) replaced by `***`, for error messages.
fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        // `scheme:opaque` (no authority) may hide credentials anywhere, except for SQLite paths.
        Ok(u) if u.cannot_be_a_base() && u.scheme() != "sqlite" => format!("{}:...", u.scheme()),
        Ok(_) => url.to_owned(),
        // Unparsable: keep the scheme only, the rest may hold a password.
        Err(_) => match url.split_once(':') {
            Some((scheme, _)) => format!("{scheme}:..."),
            None => "(not a URL)".to_owned(),
        },
    }
}

/// Whether `s` is a Kubernetes namespace name (an RFC 1123 label): 1 to 63 lowercase
/// ASCII letters, digits and `-`, starting and ending with a letter or digit.
pub fn is_namespace_name(s: &str) -> bool {
    agenthooks_crds::names::is_dns_label(s)
}

/// `created_at` as stored on SQLite and compared for `since`: UTC, fixed width
/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (27 bytes), so text order is time order.
fn sqlite_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The columns of one stored row, decoded to plain types by a backend; [`RawRow::into_row`]
/// checks the words and builds the [`AuditRow`].
struct RawRow {
    id: i64,
    hook_uid: String,
    hook_namespace: String,
    hook_name: String,
    tenant: String,
    session_id: String,
    event: String,
    input_hash: String,
    decision: String,
    duration_ms: i64,
    dedup_key: String,
    error: Option<String>,
    error_detail: Option<String>,
    error_detail_key_id: Option<String>,
    metadata: serde_json::Value,
    created_at: DateTime<Utc>,
}

impl RawRow {
    /// Decodes the backend-neutral columns of `row` (row `id`); `metadata` and
    /// `created_at` come decoded by the backend.
    fn decode<R>(
        row: &R,
        id: i64,
        metadata: serde_json::Value,
        created_at: DateTime<Utc>,
    ) -> Result<RawRow, StoreError>
    where
        R: sqlx::Row,
        &'static str: sqlx::ColumnIndex<R>,
        for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(RawRow {
            id,
            hook_uid: column(row, id, "hook_uid")?,
            hook_namespace: column(row, id, "hook_namespace")?,
            hook_name: column(row, id, "hook_name")?,
            tenant: column(row, id, "tenant")?,
            session_id: column(row, id, "session_id")?,
            event: column(row, id, "event")?,
            input_hash: column(row, id, "input_hash")?,
            decision: column(row, id, "decision")?,
            duration_ms: column(row, id, "duration_ms")?,
            dedup_key: column(row, id, "dedup_key")?,
            error: column(row, id, "error")?,
            error_detail: column(row, id, "error_detail")?,
            error_detail_key_id: column(row, id, "error_detail_key_id")?,
            metadata,
            created_at,
        })
    }

    fn into_row(self) -> Result<AuditRow, StoreError> {
        let id = self.id;
        let corrupt = |column, message: String| StoreError::Corrupt {
            id,
            column,
            message,
        };
        let event = HookEvent::parse(&self.event)
            .ok_or_else(|| corrupt("event", format!("unknown event {:?}", self.event)))?;
        let decision =
            parse_decision(&self.decision).map_err(|e| corrupt("decision", e.to_string()))?;
        let duration_ms = u64::try_from(self.duration_ms)
            .map_err(|_| corrupt("duration_ms", format!("negative: {}", self.duration_ms)))?;
        let error_detail = match (self.error_detail, self.error_detail_key_id) {
            (Some(ciphertext), Some(key_id)) => Some(SealedDetail { key_id, ciphertext }),
            (None, None) => None,
            _ => {
                return Err(corrupt(
                    "error_detail_key_id",
                    "error_detail and error_detail_key_id must be both set or both null".into(),
                ));
            }
        };
        Ok(AuditRow {
            id: Some(id),
            hook_uid: self.hook_uid,
            hook_namespace: self.hook_namespace,
            hook_name: self.hook_name,
            tenant: self.tenant,
            session_id: self.session_id,
            event,
            input_hash: self.input_hash,
            decision,
            duration_ms,
            dedup_key: self.dedup_key,
            error: self.error,
            error_detail,
            metadata: self.metadata,
            created_at: self.created_at,
        })
    }
}

/// Column `name` of `row` (row `id`, for the error) as a `T`; a type mismatch or NULL
/// where none belongs is [`StoreError::Corrupt`].
fn column<'r, R, T>(row: &'r R, id: i64, name: &'static str) -> Result<T, StoreError>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    row.try_get(name).map_err(|e| StoreError::Corrupt {
        id,
        column: name,
        message: e.to_string(),
    })
}

/// Appends the history query to `qb`: `SELECT ... FROM hook_executions WHERE <filters>
/// (`hook_namespace = ` [`ExecutionQuery::scope`], `hook_name`, `decision` (a literal),
/// `since`)
/// AND id < <cursor> ORDER BY id DESC LIMIT <limit + 1>` (the extra row tells whether a
/// next page exists). `since` is the backend's encoding of `q.since`.
fn push_list_sql<'a, DB, T>(
    qb: &mut sqlx::QueryBuilder<'a, DB>,
    q: &'a ExecutionQuery,
    since: Option<T>,
) where
    DB: sqlx::Database,
    T: 'a + sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    qb.push("SELECT ")
        .push(SELECT_COLUMNS)
        .push(" FROM hook_executions");
    let mut glue = " WHERE ";
    if let Some(namespace) = q.scope() {
        qb.push(glue).push("hook_namespace = ").push_bind(namespace);
        glue = " AND ";
    }
    if let Some(hook) = &q.hook {
        qb.push(glue)
            .push("hook_name = ")
            .push_bind(hook.name.as_str());
        glue = " AND ";
    }
    if let Some(decision) = q.decision {
        // A literal, not a bound parameter: PostgreSQL indexes only the rare decisions
        // (`WHERE decision <> 'allow'`, migration 0004), and a generic plan, which cannot
        // see a parameter's value, could not prove that index usable. The four words come
        // from `Outcome::as_str`, never from the request.
        qb.push(glue)
            .push("decision = '")
            .push(decision.as_str())
            .push("'");
        glue = " AND ";
    }
    if let Some(since) = since {
        qb.push(glue).push("created_at >= ").push_bind(since);
        glue = " AND ";
    }
    if let Some(cursor) = q.cursor {
        qb.push(glue).push("id < ").push_bind(cursor.before_id());
    }
    qb.push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(q.limit) + 1);
}

/// `duration_ms` as a BIGINT (saturating: no run lasts 292 million years).
fn duration_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut ExecutionParams)) -> ExecutionParams {
        let mut p = ExecutionParams::default();
        f(&mut p);
        p
    }

    #[test]
    fn empty_params_give_the_default_query() {
        let q = ExecutionQuery::from_params(&ExecutionParams::default()).unwrap();
        assert_eq!(q, ExecutionQuery::default());
        assert_eq!(q.limit, 50);
    }

    #[test]
    fn all_params_parse() {
        let cursor = Cursor::after_row(77).unwrap().encode();
        let q = ExecutionQuery::from_params(&params(|p| {
            p.hook = Some("team-a/deny-rm".into());
            p.decision = Some("block".into());
            p.since = Some("2026-11-30T07:00:00+01:00".into());
            p.limit = Some("500".into());
            p.cursor = Some(cursor);
        }))
        .unwrap();
        assert_eq!(
            q.hook,
            Some(HookRef {
                namespace: "team-a".into(),
                name: "deny-rm".into()
            })
        );
        assert_eq!(q.decision, Some(Outcome::Block));
        assert_eq!(q.since.unwrap().to_rfc3339(), "2026-11-30T06:00:00+00:00");
        assert_eq!(q.limit, 500);
        assert_eq!(q.cursor.unwrap().before_id(), 77);
    }

    #[test]
    fn limit_edges() {
        for (l, ok) in [
            ("1", true),
            ("500", true),
            ("0", false),
            ("501", false),
            ("-1", false),
            ("ten", false),
            ("", false),
            ("4294967296", false),
        ] {
            let r = ExecutionQuery::from_params(&params(|p| p.limit = Some(l.into())));
            match r {
                Ok(q) => {
                    assert!(ok, "{l} accepted");
                    assert_eq!(q.limit.to_string(), l);
                }
                Err(e) => {
                    assert!(!ok, "{l} refused: {e}");
                    assert_eq!(e.field, "limit");
                    assert!(e.message.contains("1 to 500"), "{e}");
                }
            }
        }
        let q = ExecutionQuery {
            limit: 0,
            ..Default::default()
        };
        assert_eq!(
            q.validate().unwrap_err().to_string(),
            "limit: must be from 1 to 500, got 0"
        );
        let q = ExecutionQuery {
            limit: 501,
            ..Default::default()
        };
        assert_eq!(q.validate().unwrap_err().field, "limit");
    }

    #[test]
    fn each_bad_param_is_named() {
        type Case = (&'static str, fn(&mut ExecutionParams));
        let cases: [Case; 8] = [
            ("hook", |p| p.hook = Some("deny-rm".into())),
            ("hook", |p| p.hook = Some("/deny-rm".into())),
            ("hook", |p| p.hook = Some("team-a/".into())),
            ("hook", |p| p.hook = Some("a/b/c".into())),
            ("decision", |p| p.decision = Some("deny".into())),
            ("since", |p| p.since = Some("yesterday".into())),
            ("since", |p| p.since = Some("2026-11-30".into())),
            ("cursor", |p| p.cursor = Some("nope".into())),
        ];
        for (field, f) in cases {
            let e = ExecutionQuery::from_params(&params(f)).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with(&format!("{field}: ")), "{e}");
        }
    }

    #[test]
    fn namespace_and_hook_name_one_namespace() {
        // namespace alone, hook alone (it implies its namespace), both the same.
        let q =
            ExecutionQuery::from_params(&params(|p| p.namespace = Some("team-a".into()))).unwrap();
        assert_eq!((q.scope(), q.hook.as_ref()), (Some("team-a"), None));
        let q =
            ExecutionQuery::from_params(&params(|p| p.hook = Some("team-a/deny".into()))).unwrap();
        assert_eq!((q.namespace.as_deref(), q.scope()), (None, Some("team-a")));
        let q = ExecutionQuery::from_params(&params(|p| {
            p.namespace = Some("team-a".into());
            p.hook = Some("team-a/deny".into());
        }))
        .unwrap();
        assert_eq!(q.scope(), Some("team-a"));
        assert_eq!(q.hook.unwrap().name, "deny");
        assert_eq!(ExecutionQuery::default().scope(), None, "every namespace");
        // Both, different: 400 naming namespace.
        let e = ExecutionQuery::from_params(&params(|p| {
            p.namespace = Some("team-b".into());
            p.hook = Some("team-a/deny".into());
        }))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "namespace: team-b is not the namespace of hook=team-a/deny: give one of them, or the same namespace in both"
        );
        // validate() holds the rule for queries built by hand too.
        let q = ExecutionQuery {
            namespace: Some("team-b".into()),
            hook: Some(HookRef::parse("team-a/deny").unwrap()),
            ..Default::default()
        };
        assert_eq!(q.validate().unwrap_err().field, "namespace");
    }

    #[test]
    fn namespace_must_be_a_namespace_name() {
        for ok in ["a", "team-a", "0", "a-0", &"a".repeat(63)] {
            assert!(is_namespace_name(ok), "{ok}");
            let q = ExecutionQuery::from_params(&params(|p| p.namespace = Some(ok.into())));
            assert_eq!(q.unwrap().scope(), Some(ok));
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Team",
            "team_a",
            "a/b",
            "a b",
            "é",
            &"a".repeat(64),
            "a\0b",
        ] {
            assert!(!is_namespace_name(bad), "{bad:?}");
            let e = ExecutionQuery::from_params(&params(|p| p.namespace = Some(bad.into())))
                .unwrap_err();
            assert_eq!(e.field, "namespace", "{bad:?}");
            assert!(e.message.starts_with("expected a namespace name"), "{e}");
        }
    }

    #[test]
    fn the_list_sql_names_the_decision_as_a_literal_and_binds_the_rest() {
        let q = ExecutionQuery {
            hook: Some(HookRef::parse("team-a/x").unwrap()),
            decision: Some(Outcome::Timeout),
            cursor: Some(Cursor::after_row(42).unwrap()),
            limit: 10,
            ..ExecutionQuery::default()
        };
        let mut qb = sqlx::QueryBuilder::<sqlx::Postgres>::new("");
        push_list_sql(&mut qb, &q, Some(Utc::now()));
        assert_eq!(
            qb.sql(),
            format!(
                "SELECT {SELECT_COLUMNS} FROM hook_executions WHERE hook_namespace = $1 AND \
                 hook_name = $2 AND decision = 'timeout' AND created_at >= $3 AND id < $4 \
                 ORDER BY id DESC LIMIT $5"
            )
        );
    }

    #[test]
    fn hook_ref_displays_as_given() {
        let h = HookRef::parse("ns/name").unwrap();
        assert_eq!(h.to_string(), "ns/name");
    }

    #[test]
    fn sqlite_time_is_fixed_width_and_orders_like_time() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let a = sqlite_time(&t("2026-11-30T06:00:00Z"));
        let b = sqlite_time(&t("2026-11-30T06:00:00.5Z"));
        let c = sqlite_time(&t("2026-11-30T06:00:00.000000999Z"));
        assert_eq!(a, "2026-11-30T06:00:00.000000Z");
        assert_eq!(b, "2026-11-30T06:00:00.500000Z");
        assert_eq!(c, a, "nanoseconds are cut to microseconds");
        assert_eq!(a.len(), 27);
        assert!(a < b);
        assert!(sqlite_time(&t("2026-11-30T07:00:00+02:00")) < a);
    }

    #[test]
    fn urls_never_show_passwords() {
        assert_eq!(
            redact_url("postgres://audit:s3cret@db:5432/hooks"),
            "postgres://audit:***@db:5432/hooks"
        );
        assert_eq!(redact_url("postgres://db/hooks"), "postgres://db/hooks");
        assert_eq!(redact_url("mysql:s3cret@@::"), "mysql:...");
        assert_eq!(redact_url("postgres://u:pa/ss@h/db"), "postgres:...");
        assert_eq!(redact_url("sqlite:audit.db"), "sqlite:audit.db");
        assert_eq!(
            redact_url("sqlite:///var/lib/a.db?mode=rwc"),
            "sqlite:///var/lib/a.db?mode=rwc"
        );
    }

    #[tokio::test]
    async fn unknown_schemes_are_refused() {
        let e = AuditStore::connect("mysql://u:pw@h/db").await.unwrap_err();
        assert!(matches!(e, StoreError::BadUrl { .. }));
        let msg = e.to_string();
        assert!(msg.contains("sqlite://PATH or postgres://"), "{msg}");
        assert!(!msg.contains("pw@"), "{msg}");
        assert!(!e.is_retryable());
    }

    #[test]
    fn page_cursor_only_when_more_rows_exist() {
        let row = |id| AuditRow {
            id: Some(id),
            hook_uid: "u".into(),
            hook_namespace: "n".into(),
            hook_name: "h".into(),
            tenant: "t".into(),
            session_id: "s".into(),
            event: HookEvent::Stop,
            input_hash: String::new(),
            decision: Outcome::Allow,
            duration_ms: 1,
            dedup_key: format!("u:{id}"),
            error: None,
            error_detail: None,
            metadata: serde_json::json!({}),
            created_at: DateTime::UNIX_EPOCH,
        };
        let p = ExecutionPage::from_fetched(vec![row(9), row(8), row(7)], 2);
        assert_eq!(p.rows.len(), 2);
        assert_eq!(
            Cursor::parse(p.next_cursor.as_deref().unwrap())
                .unwrap()
                .before_id(),
            8
        );
        let p = ExecutionPage::from_fetched(vec![row(9), row(8)], 2);
        assert_eq!((p.rows.len(), p.next_cursor), (2, None));
        let p = ExecutionPage::from_fetched(vec![], 2);
        assert_eq!((p.rows.len(), p.next_cursor), (0, None));
    }
}
