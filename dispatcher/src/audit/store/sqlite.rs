//! SQLite backend of [`super::AuditStore`]: the standalone default (`--audit-db
//! sqlite://PATH`). WAL journal so history reads never wait for the writer, `synchronous =
//! FULL` so a committed batch survives a power cut, 5 s busy timeout.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};

use super::{
    AuditRow, ExecutionQuery, INSERT_COLUMNS, RawRow, SELECT_COLUMNS, StoreError, StoredEvent,
    column, duration_i64, push_list_sql, redact_url, sqlite_time,
};

/// [`super::AuditStore::backend`] name.
pub(super) const BACKEND: &str = "sqlite";

/// Rows per multi-row INSERT: 15 binds each, 7,500 per statement, well under SQLite's
/// 32,766 bound parameters (SQLITE_MAX_VARIABLE_NUMBER since 3.32).
const ROWS_PER_INSERT: usize = 500;

/// How long a statement waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Pool size for a file database: one writer at a time (SQLite), readers alongside (WAL).
const MAX_CONNECTIONS: u32 = 4;

fn db_error(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database {
        backend: BACKEND,
        op,
        source,
    }
}

/// Makes the database file readable by its owner only (0600): rows name tenants, sessions
/// and errors. A missing file is created so; an existing one (and its `-wal`, `-shm`) that
/// others may read is narrowed, with a warning. SQLite gives new `-wal` and `-shm` files
/// the database file's mode. Failures are left to the connect to report.
fn owner_only(path: &std::path::Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = std::path::PathBuf::from(file);
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o700)) {
                Ok(()) => {
                    tracing::warn!(file = %file.display(), was = format!("{:o}", mode & 0o777), "audit database file was readable by others: narrowed to its owner")
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "audit database file is readable by others and could not be narrowed")
                }
            }
        }
    }
}

pub(super) async fn connect(url: &str) -> Result<SqlitePool, StoreError> {
    let opts = SqliteConnectOptions::from_str(url)
        .map_err(|e| StoreError::BadUrl {
            url: redact_url(url),
            message: e.to_string(),
        })?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    // sqlx gives `:memory:` a shared-cache name, but the database dies with its last
    // connection: keep exactly one, forever.
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let pool_opts = if in_memory {
        SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
    } else {
        SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS)
    };
    if !in_memory {
        owner_only(opts.get_filename());
    }
    let pool = pool_opts
        .connect_with(opts)
        .await
        .map_err(|source| StoreError::Connect {
            backend: BACKEND,
            url: redact_url(url),
            source,
        })?;
    sqlx::migrate!("./migrations/sqlite")
        .run(&pool)
        .await
        .map_err(|source| StoreError::Migrate {
            backend: BACKEND,
            source,
        })?;
    Ok(pool)
}

pub(super) async fn insert_batch(pool: &SqlitePool, rows: &[AuditRow]) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error("insert_batch"))?;
    let mut inserted = 0;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let times: Vec<String> = chunk.iter().map(|r| sqlite_time(&r.created_at)).collect();
        let metadata: Vec<String> = chunk.iter().map(|r| r.metadata.to_string()).collect();
        let mut qb = QueryBuilder::<Sqlite>::new("INSERT INTO hook_executions (");
        qb.push(INSERT_COLUMNS).push(") ");
        qb.push_values(
            chunk.iter().zip(times.iter()).zip(metadata.iter()),
            |mut b, ((r, at), meta)| {
                let detail = r.error_detail.as_ref();
                b.push_bind(r.hook_uid.as_str())
                    .push_bind(r.hook_namespace.as_str())
                    .push_bind(r.hook_name.as_str())
                    .push_bind(r.tenant.as_str())
                    .push_bind(r.session_id.as_str())
                    .push_bind(r.event.as_str())
                    .push_bind(r.input_hash.as_str())
                    .push_bind(r.decision.as_str())
                    .push_bind(duration_i64(r.duration_ms))
                    .push_bind(r.dedup_key.as_str())
                    .push_bind(r.error.as_deref())
                    .push_bind(detail.map(|d| d.ciphertext.as_str()))
                    .push_bind(detail.map(|d| d.key_id.as_str()))
                    .push_bind(meta.as_str())
                    .push_bind(at.as_str());
            },
        );
        qb.push(" ON CONFLICT (dedup_key) DO NOTHING");
        // Only full chunks repeat the same SQL: cache just that statement.
        let done = qb
            .build()
            .persistent(chunk.len() == ROWS_PER_INSERT)
            .execute(&mut *tx)
            .await
            .map_err(db_error("insert_batch"))?;
        inserted += done.rows_affected();
    }
    tx.commit().await.map_err(db_error("insert_batch"))?;
    Ok(inserted)
}

pub(super) async fn list(
    pool: &SqlitePool,
    q: &ExecutionQuery,
) -> Result<Vec<AuditRow>, StoreError> {
    let since = q.since.as_ref().map(sqlite_time);
    let mut qb = QueryBuilder::<Sqlite>::new("");
    push_list_sql(&mut qb, q, since);
    let rows = qb.build().fetch_all(pool).await.map_err(db_error("list"))?;
    rows.iter().map(decode).collect()
}

pub(super) async fn get(pool: &SqlitePool, id: i64) -> Result<Option<AuditRow>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {SELECT_COLUMNS} FROM hook_executions WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
    .map_err(db_error("get"))?;
    row.as_ref().map(decode).transpose()
}

/// `(dedup_key, tenant, session_id, event, input_hash)` of the stored rows among `keys`.
pub(super) async fn stored_events(
    pool: &SqlitePool,
    keys: &[&str],
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut found = Vec::new();
    for chunk in keys.chunks(ROWS_PER_INSERT) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT dedup_key, tenant, session_id, event, input_hash FROM hook_executions \
             WHERE dedup_key IN (",
        );
        let mut list = qb.separated(", ");
        for k in chunk {
            list.push_bind(*k);
        }
        qb.push(")");
        found.extend(
            qb.build_query_as::<StoredEvent>()
                .fetch_all(pool)
                .await
                .map_err(db_error("stored_events"))?,
        );
    }
    Ok(found)
}

fn decode(row: &SqliteRow) -> Result<AuditRow, StoreError> {
    let id: i64 = column(row, 0, "id")?;
    let metadata_text: String = column(row, id, "metadata")?;
    let metadata = serde_json::from_str(&metadata_text).map_err(|e| StoreError::Corrupt {
        id,
        column: "metadata",
        message: format!("not JSON: {e}"),
    })?;
    let at: String = column(row, id, "created_at")?;
    let created_at = DateTime::parse_from_rfc3339(&at)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt {
            id,
            column: "created_at",
            message: format!("{at:?} is not an RFC 3339 time: {e}"),
        })?;
    RawRow::decode(row, id, metadata, created_at)?.into_row()
}
