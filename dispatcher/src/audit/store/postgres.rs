//! PostgreSQL backend of [`super::AuditStore`] (`--audit-db postgres://...`, for many
//! replicas). Batches go in as one `INSERT ... SELECT FROM UNNEST(<15 arrays>)`: one
//! statement text for every batch size, 15 bind parameters whatever the row count (far
//! from the 65,535 limit), one implicit transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, QueryBuilder};

use super::{
    AuditRow, ExecutionQuery, INSERT_COLUMNS, RawRow, SELECT_COLUMNS, StoreError, StoredEvent,
    column, duration_i64, push_list_sql, redact_url,
};

/// [`super::AuditStore::backend`] name.
pub(super) const BACKEND: &str = "postgres";

/// Most pooled connections per dispatcher.
const MAX_CONNECTIONS: u32 = 8;

/// How long an operation waits for a connection before failing (the writer then retries
/// or spools; the database may be down). Short: while it runs, new rows wait in memory,
/// where a crash would lose them.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

fn db_error(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database {
        backend: BACKEND,
        op,
        source,
    }
}

pub(super) async fn connect(url: &str) -> Result<PgPool, StoreError> {
    let opts: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| StoreError::BadUrl {
        url: redact_url(url),
        message: e.to_string(),
    })?;
    let pool = PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(opts)
        .await
        .map_err(|source| StoreError::Connect {
            backend: BACKEND,
            url: redact_url(url),
            source,
        })?;
    sqlx::migrate!("./migrations/postgres")
        .run(&pool)
        .await
        .map_err(|source| StoreError::Migrate {
            backend: BACKEND,
            source,
        })?;
    Ok(pool)
}

pub(super) async fn insert_batch(pool: &PgPool, rows: &[AuditRow]) -> Result<u64, StoreError> {
    let n = rows.len();
    let mut hook_uid = Vec::with_capacity(n);
    let mut hook_namespace = Vec::with_capacity(n);
    let mut hook_name = Vec::with_capacity(n);
    let mut tenant = Vec::with_capacity(n);
    let mut session_id = Vec::with_capacity(n);
    let mut event = Vec::with_capacity(n);
    let mut input_hash = Vec::with_capacity(n);
    let mut decision = Vec::with_capacity(n);
    let mut duration_ms = Vec::with_capacity(n);
    let mut dedup_key = Vec::with_capacity(n);
    let mut error = Vec::with_capacity(n);
    let mut error_detail = Vec::with_capacity(n);
    let mut error_detail_key_id = Vec::with_capacity(n);
    let mut metadata = Vec::with_capacity(n);
    let mut created_at = Vec::with_capacity(n);
    for r in rows {
        hook_uid.push(r.hook_uid.as_str());
        hook_namespace.push(r.hook_namespace.as_str());
        hook_name.push(r.hook_name.as_str());
        tenant.push(r.tenant.as_str());
        session_id.push(r.session_id.as_str());
        event.push(r.event.as_str());
        input_hash.push(r.input_hash.as_str());
        decision.push(r.decision.as_str());
        duration_ms.push(duration_i64(r.duration_ms));
        dedup_key.push(r.dedup_key.as_str());
        error.push(r.error.as_deref());
        error_detail.push(r.error_detail.as_ref().map(|d| d.ciphertext.as_str()));
        error_detail_key_id.push(r.error_detail.as_ref().map(|d| d.key_id.as_str()));
        metadata.push(Json(&r.metadata));
        created_at.push(r.created_at);
    }
    let sql = format!(
        "INSERT INTO hook_executions ({INSERT_COLUMNS}) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
         $6::text[], $7::text[], $8::text[], $9::int8[], $10::text[], $11::text[], \
         $12::text[], $13::text[], $14::jsonb[], $15::timestamptz[]) \
         ON CONFLICT (dedup_key) DO NOTHING"
    );
    let done = sqlx::query(&sql)
        .bind(hook_uid)
        .bind(hook_namespace)
        .bind(hook_name)
        .bind(tenant)
        .bind(session_id)
        .bind(event)
        .bind(input_hash)
        .bind(decision)
        .bind(duration_ms)
        .bind(dedup_key)
        .bind(error)
        .bind(error_detail)
        .bind(error_detail_key_id)
        .bind(metadata)
        .bind(created_at)
        .execute(pool)
        .await
        .map_err(db_error("insert_batch"))?;
    Ok(done.rows_affected())
}

pub(super) async fn list(pool: &PgPool, q: &ExecutionQuery) -> Result<Vec<AuditRow>, StoreError> {
    let mut qb = QueryBuilder::<Postgres>::new("");
    push_list_sql(&mut qb, q, q.since);
    let rows = qb.build().fetch_all(pool).await.map_err(db_error("list"))?;
    rows.iter().map(decode).collect()
}

pub(super) async fn get(pool: &PgPool, id: i64) -> Result<Option<AuditRow>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {SELECT_COLUMNS} FROM hook_executions WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
    .map_err(db_error("get"))?;
    row.as_ref().map(decode).transpose()
}

/// `(dedup_key, tenant, session_id, event, input_hash)` of the stored rows among `keys`.
pub(super) async fn stored_events(
    pool: &PgPool,
    keys: &[&str],
) -> Result<Vec<StoredEvent>, StoreError> {
    sqlx::query_as(
        "SELECT dedup_key, tenant, session_id, event, input_hash FROM hook_executions \
         WHERE dedup_key = ANY($1)",
    )
    .bind(keys)
    .fetch_all(pool)
    .await
    .map_err(db_error("stored_events"))
}

fn decode(row: &PgRow) -> Result<AuditRow, StoreError> {
    let id: i64 = column(row, 0, "id")?;
    let Json(metadata): Json<serde_json::Value> = column(row, id, "metadata")?;
    let created_at: DateTime<Utc> = column(row, id, "created_at")?;
    RawRow::decode(row, id, metadata, created_at)?.into_row()
}
