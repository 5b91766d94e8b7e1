//! The audit writer (CONTRACT §7.6; issue 5 "Durability: nothing lost"): one task that
//! drains the sink's queue in batches, builds the rows ([`super::build`]) and writes them
//! with [`AuditStore::insert_batch`].
//!
//! - **Batches**: up to [`WriterConfig::batch_rows`] rows, or whatever arrived within
//!   [`WriterConfig::linger`] of the first one.
//! - **Database down**: a failed (or timed-out) write is counted
//!   (`agenthooks_audit_write_failures_total`), logged (`security.hook.audit_write_failed`)
//!   and its batch appended to the spool ([`super::spool`]); later batches go straight to
//!   the spool until a write succeeds again. The spool is replayed oldest file first
//!   with exponential backoff ([`WriterConfig::retry_min`] to [`WriterConfig::retry_max`]);
//!   a file is deleted only after all its rows are written. The dedup key makes a
//!   replay of rows that did reach the database harmless.
//! - **Database down at start** (PostgreSQL; a SQLite file is opened before serving): a
//!   background task ([`connect_until_up`]) connects, backing off from
//!   [`WriterConfig::retry_min`] to [`WriterConfig::retry_max`], each attempt bounded by
//!   [`WriterConfig::write_timeout`]. Until it first succeeds, `/readyz` says `spooling`
//!   (reason "not connected ... since start"), rows go straight to the spool (never held
//!   in memory waiting for a connect) and the writer does not try the database itself.
//!   Every failed attempt counts in `agenthooks_audit_write_failures_total`; the first is
//!   logged (`security.hook.audit_write_failed`, warn; error when retrying cannot help
//!   without a fix, [`StoreError::is_retryable`]), then one line per
//!   [`CONNECT_LOG_INTERVAL`]. Once connected, the spool is replayed.
//! - **Database answers but refuses rows** (a data or constraint error): the batch is
//!   split in halves until the refused rows are alone; those are dropped loudly, the
//!   others written.
//! - **Spool full**: a batch is spooled as far as it fits (row by row); only the rows for
//!   which no room is left are dropped and counted (`agenthooks_audit_rows_dropped_total`),
//!   an error is logged (rate-limited) and `/readyz` says `degraded`.
//! - **Shutdown** ([`super::sink::AuditSink::shutdown`]): what is queued is written —
//!   to the database, or to the spool if the database does not answer within
//!   [`WriterConfig::flush_write_timeout`] — and the next start replays the spool.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::build::build_row;
use super::error_detail::ErrorDetailKeys;
use super::row::AuditRow;
use super::sink::{AuditHealth, AuditSink, FlushReport, RunRecord, SinkShared};
use super::spool::{Appended, Spool, SpoolError};
use super::store::{AuditStore, StoreError};
use crate::metrics::Metrics;

/// How often a lingering batch looks at the queue for more runs.
pub const LINGER_STEP: Duration = Duration::from_millis(5);
/// While the database was never reached since start, at most one warning per this
/// interval about the failed connect attempts (the others are debug lines; every attempt
/// is counted).
pub const CONNECT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Batching, queue and retry settings. [`Default`] holds the values the dispatcher uses.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Most rows per `insert_batch` (default 500).
    pub batch_rows: usize,
    /// How long a batch waits for more rows after its first (default 50 ms).
    pub linger: Duration,
    /// Most runs waiting in memory (default 65,536).
    pub queue_rows: usize,
    /// Most bytes of event JSON held by runs waiting in memory (default 64 MiB).
    pub queue_bytes: usize,
    /// A write (or connect) that takes longer counts as failed and its batch is spooled
    /// (default 2 s; a 500-row batch takes ~15 ms). Rows arriving meanwhile wait in
    /// memory, so this bounds what a crash during a database failure can lose.
    pub write_timeout: Duration,
    /// The same during the shutdown flush, after which rows go to the spool (default 3 s).
    pub flush_write_timeout: Duration,
    /// First delay before replaying the spool after a failure (default 250 ms); doubles
    /// up to `retry_max` (default 5 s) while writes keep failing.
    pub retry_min: Duration,
    pub retry_max: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            batch_rows: 500,
            linger: Duration::from_millis(50),
            queue_rows: 65_536,
            queue_bytes: 64 * 1024 * 1024,
            write_timeout: Duration::from_secs(2),
            flush_write_timeout: Duration::from_secs(3),
            retry_min: Duration::from_millis(250),
            retry_max: Duration::from_secs(5),
        }
    }
}

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// The database could not be reached or failed the statement: retry later.
    Unavailable(String),
    /// The database answered and refused these rows (a data or constraint error):
    /// retrying the same rows fails again.
    Refused(String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Unavailable(m) | WriteError::Refused(m) => f.write_str(m),
        }
    }
}

/// Where batches go: the audit database ([`LazyStore`]) or, in tests, anything else.
pub trait AuditTarget: Send + Sync + 'static {
    /// Inserts `rows` (all or nothing), skipping dedup keys already stored; the rows
    /// inserted.
    fn write<'a>(&'a self, rows: &'a [AuditRow]) -> BoxFuture<'a, Result<u64, WriteError>>;
}

/// Whether a store error is the database refusing these rows (PostgreSQL SQLSTATE
/// classes 22 data exception and 23 integrity constraint; SQLite constraint errors)
/// rather than the database being unavailable.
fn classify(e: StoreError) -> WriteError {
    let refused = match &e {
        StoreError::Database {
            source: sqlx::Error::Database(db),
            ..
        } => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            code.starts_with("22")
                || code.starts_with("23")
                || !matches!(db.kind(), sqlx::error::ErrorKind::Other)
        }
        _ => false,
    };
    if refused {
        WriteError::Refused(e.to_string())
    } else {
        WriteError::Unavailable(e.to_string())
    }
}

/// The audit database, connected on first use when it was down at start (the
/// connection also runs the migrations). The connected store is shared with
/// [`AuditSink::store`] for reading history.
pub struct LazyStore {
    url: String,
    cell: Arc<OnceLock<AuditStore>>,
    connect_timeout: Duration,
}

impl LazyStore {
    async fn store(&self) -> Result<AuditStore, WriteError> {
        if let Some(s) = self.cell.get() {
            return Ok(s.clone());
        }
        let store = tokio::time::timeout(self.connect_timeout, AuditStore::connect(&self.url))
            .await
            .map_err(|_| {
                WriteError::Unavailable(format!(
                    "no connection to the audit database within {} s",
                    self.connect_timeout.as_secs()
                ))
            })?
            .map_err(|e| WriteError::Unavailable(e.to_string()))?;
        tracing::info!(
            backend = store.backend(),
            "audit database connected; migrations applied"
        );
        Ok(self.cell.get_or_init(|| store).clone())
    }
}

impl AuditTarget for LazyStore {
    fn write<'a>(&'a self, rows: &'a [AuditRow]) -> BoxFuture<'a, Result<u64, WriteError>> {
        Box::pin(async move {
            let store = self.store().await?;
            store.insert_batch(rows).await.map_err(classify)
        })
    }
}

/// Settings of [`start`]: `--audit-db`, `--audit-key-file`, `--audit-spool-dir`,
/// `--audit-spool-max-bytes`.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// `sqlite://PATH` or `postgres://...` (see [`AuditStore::connect`]).
    pub url: String,
    /// Keys for `error_detail`; `None`: no error detail is stored.
    pub keys: Option<ErrorDetailKeys>,
    /// The spool directory.
    pub spool_dir: PathBuf,
    /// The spool's bound in bytes.
    pub spool_max_bytes: u64,
    pub writer: WriterConfig,
}

/// Errors of [`start`]: configuration the dispatcher cannot run with. (The inner error is
/// part of the message, not a `source`, so a printed chain says it once.)
#[derive(Debug, thiserror::Error)]
pub enum AuditStartError {
    /// The spool directory cannot be created, read or locked.
    #[error("--audit-spool-dir: {0}")]
    Spool(SpoolError),
    /// The URL is malformed, or the SQLite file cannot be opened (a local file is
    /// configuration, not an outage).
    #[error("--audit-db: {0}")]
    Store(StoreError),
    /// A `postgres://` URL that does not parse (the URL itself is not repeated: it may
    /// hold a password).
    #[error("--audit-db: not a valid PostgreSQL URL: {0}")]
    BadUrl(String),
}

/// `sqlite` or `postgres` for a URL [`AuditStore::connect`] accepts.
fn backend_of(url: &str) -> &'static str {
    if super::store::is_sqlite_url(url) {
        "sqlite"
    } else {
        "postgres"
    }
}

/// How long [`start`] waits for a spool directory another process holds: a predecessor
/// on the same volume (a replaced Pod) flushing its queue before it exits. Longer than
/// the chart's grace period (shutdown delay + 40 s).
pub const SPOOL_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Opens the spool (waiting up to [`SPOOL_LOCK_WAIT`] while another process holds it),
/// connects to the database and starts the writer on the current runtime. A PostgreSQL database that does not answer at start is not an error: the
/// dispatcher serves, rows spool, and the writer keeps trying (logged). A malformed URL,
/// an unusable SQLite file or spool directory is ([`AuditStartError`]).
pub async fn start(config: AuditConfig, metrics: &Metrics) -> Result<AuditSink, AuditStartError> {
    let dir = config.spool_dir.clone();
    let max = config.spool_max_bytes;
    let spool =
        tokio::task::spawn_blocking(move || Spool::open_waiting(&dir, max, SPOOL_LOCK_WAIT))
            .await
            .expect("spool open task")
            .map_err(AuditStartError::Spool)?;
    let cell = Arc::new(OnceLock::new());
    let backend = backend_of(&config.url);
    let health = Arc::new(AuditHealth::default());
    let spool_dir = config.spool_dir.display().to_string();
    if backend == "sqlite" {
        // A local file: failing to open it is configuration, not an outage.
        let store = AuditStore::connect(&config.url)
            .await
            .map_err(AuditStartError::Store)?;
        tracing::info!(backend, spool = %spool_dir, spooled_rows = spool.rows(), "audit trail on: database opened, migrations applied");
        let _ = cell.set(store);
    } else {
        // A malformed URL is refused now; the database itself is reached in the
        // background, so one that is down at start never delays serving.
        if let Err(e) = config.url.parse::<sqlx::postgres::PgConnectOptions>() {
            return Err(AuditStartError::BadUrl(e.to_string()));
        }
        // Not `ok` until the first connect: rows spool meanwhile (see the module docs).
        health.db_down.store(true, Ordering::Relaxed);
        health.connecting.store(true, Ordering::Release);
        tracing::info!(
            backend, spool = %spool_dir, spooled_rows = spool.rows(),
            "audit trail on: connecting to the database in the background; rows go to the spool until it answers"
        );
        let url = config.url.clone();
        tokio::spawn(connect_until_up(
            move || {
                let url = url.clone();
                async move { AuditStore::connect(&url).await }
            },
            Arc::clone(&cell),
            Arc::clone(&health),
            metrics.clone(),
            config.writer.clone(),
            spool_dir,
        ));
    }
    let target = Arc::new(LazyStore {
        url: config.url.clone(),
        cell: Arc::clone(&cell),
        connect_timeout: config.writer.write_timeout,
    });
    Ok(start_with(
        target,
        cell,
        backend,
        health,
        config.keys,
        spool,
        config.writer,
        metrics,
    ))
}

/// Connects to PostgreSQL (running the migrations) with `connect` until it answers
/// once, backing off between attempts; later outages are the pool's and the writer's
/// business. Until then `health.connecting` holds (`/readyz` says `spooling`, rows
/// spool). Every failed attempt is counted (`agenthooks_audit_write_failures_total`);
/// the first is logged, then at most one line per [`CONNECT_LOG_INTERVAL`].
async fn connect_until_up<F, Fut>(
    connect: F,
    cell: Arc<OnceLock<AuditStore>>,
    health: Arc<AuditHealth>,
    metrics: Metrics,
    cfg: WriterConfig,
    spool_dir: String,
) where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<AuditStore, StoreError>> + Send,
{
    let mut backoff = cfg.retry_min;
    let mut failed: u64 = 0;
    let mut last_log: Option<Instant> = None;
    while cell.get().is_none() {
        let (why, retryable) = match tokio::time::timeout(cfg.write_timeout, connect()).await {
            Ok(Ok(store)) => {
                tracing::info!(
                    backend = store.backend(), spool = %spool_dir, failed_attempts = failed,
                    "audit trail on: database connected, migrations applied"
                );
                let _ = cell.set(store);
                health.db_down.store(false, Ordering::Relaxed);
                health.connecting.store(false, Ordering::Release);
                return;
            }
            Ok(Err(e)) => (e.to_string(), e.is_retryable()),
            Err(_) => (
                format!("no answer within {} ms", cfg.write_timeout.as_millis()),
                true,
            ),
        };
        failed += 1;
        metrics.audit_write_failures.inc();
        health.connect_failures.fetch_add(1, Ordering::Relaxed);
        health.db_down.store(true, Ordering::Relaxed);
        if !retryable {
            // A failed migration or the like: trying again helps only after a fix.
            backoff = cfg.retry_max;
        }
        let now = Instant::now();
        if last_log.is_none_or(|t| now.duration_since(t) >= CONNECT_LOG_INTERVAL) {
            last_log = Some(now);
            if retryable {
                tracing::warn!(
                    target: "security.hook.audit_write_failed",
                    spool = %spool_dir, error = %why, failed_attempts = failed,
                    retry_in_ms = backoff.as_millis() as u64,
                    "audit database unreachable since start: serving anyway; rows wait in the spool and are written when it answers"
                );
            } else {
                tracing::error!(
                    target: "security.hook.audit_write_failed",
                    spool = %spool_dir, error = %why, failed_attempts = failed,
                    retry_in_ms = backoff.as_millis() as u64,
                    "audit database refused at start and retrying will not help until this is fixed: serving anyway; rows wait in the spool"
                );
            }
        } else {
            tracing::debug!(
                target: "security.hook.audit_write_failed",
                error = %why, failed_attempts = failed,
                "audit database still unreachable"
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(cfg.retry_max);
    }
}

/// Starts the writer on `target` (the database, or a test double) with an opened spool.
#[allow(clippy::too_many_arguments)]
pub fn start_with(
    target: Arc<dyn AuditTarget>,
    store: Arc<OnceLock<AuditStore>>,
    backend: &'static str,
    health: Arc<AuditHealth>,
    keys: Option<ErrorDetailKeys>,
    spool: Spool,
    cfg: WriterConfig,
    metrics: &Metrics,
) -> AuditSink {
    let (tx, rx) = mpsc::channel(cfg.queue_rows.max(1));
    health
        .spool_max_bytes
        .store(spool.max_bytes(), Ordering::Relaxed);
    let closing = CancellationToken::new();
    let writer = Writer {
        rx,
        target,
        spool: Some(spool),
        keys: keys.clone(),
        health: Arc::clone(&health),
        metrics: metrics.clone(),
        backoff: cfg.retry_min,
        next_retry: None,
        flushing: false,
        report: FlushReport::default(),
        unreadable_counted: None,
        cfg: cfg.clone(),
    };
    writer.publish_spool();
    let join = tokio::spawn(writer.run(closing.clone()));
    AuditSink {
        inner: Some(Arc::new(SinkShared {
            tx,
            max_queued_bytes: cfg.queue_bytes,
            store,
            backend,
            keys,
            health,
            metrics: metrics.clone(),
            writer: Mutex::new(Some(WriterHandle { closing, join })),
        })),
    }
}

/// The running writer: stop it with [`WriterHandle::finish`].
pub(crate) struct WriterHandle {
    closing: CancellationToken,
    join: tokio::task::JoinHandle<FlushReport>,
}

impl WriterHandle {
    /// Asks the writer to flush what is queued and stop; waits at most `deadline`.
    pub(crate) async fn finish(self, deadline: Duration) -> FlushReport {
        self.closing.cancel();
        match tokio::time::timeout(deadline, self.join).await {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => {
                tracing::error!(target: "security.hook.audit_write_failed", error = %e, "the audit writer failed during the shutdown flush");
                FlushReport {
                    timed_out: true,
                    ..Default::default()
                }
            }
            Err(_) => FlushReport {
                timed_out: true,
                ..Default::default()
            },
        }
    }
}

struct Writer {
    rx: mpsc::Receiver<RunRecord>,
    target: Arc<dyn AuditTarget>,
    /// Always `Some` except while a blocking spool operation holds it.
    spool: Option<Spool>,
    keys: Option<ErrorDetailKeys>,
    health: Arc<AuditHealth>,
    metrics: Metrics,
    cfg: WriterConfig,
    backoff: Duration,
    /// When to replay the spool next; `None` while there is nothing to replay.
    next_retry: Option<Instant>,
    /// In the shutdown flush.
    flushing: bool,
    report: FlushReport,
    /// The spool file whose unreadable lines were counted already (replays retry it).
    unreadable_counted: Option<u64>,
}

impl Writer {
    async fn run(mut self, closing: CancellationToken) -> FlushReport {
        let spooled = self.spool().rows();
        if spooled > 0 || self.health.db_down.load(Ordering::Relaxed) {
            if spooled > 0 {
                tracing::info!(
                    rows = spooled,
                    spool = %self.spool().dir().display(),
                    "audit spool holds rows from an earlier run or outage: replaying them"
                );
            }
            self.next_retry = Some(Instant::now());
        }
        let mut batch: Vec<RunRecord> = Vec::with_capacity(self.cfg.batch_rows);
        loop {
            let retry_at = self.next_retry;
            tokio::select! {
                biased;
                _ = closing.cancelled() => break,
                n = self.rx.recv_many(&mut batch, self.cfg.batch_rows) => {
                    if n == 0 {
                        break;
                    }
                    self.linger(&mut batch, &closing).await;
                    // A shutdown that cut the linger short: this batch is part of the flush.
                    self.flushing = closing.is_cancelled();
                    self.write_records(&mut batch).await;
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
            }
            // Under steady load the queue is never empty: replay between batches.
            if self.next_retry.is_some_and(|t| t <= Instant::now()) {
                self.replay_one().await;
            }
        }
        // Shutdown: no new runs; write every run queued so far.
        self.flushing = true;
        self.rx.close();
        loop {
            let n = self.rx.recv_many(&mut batch, self.cfg.batch_rows).await;
            if n == 0 {
                break;
            }
            self.write_records(&mut batch).await;
        }
        let report = self.report.clone();
        tracing::info!(
            written = report.written,
            spooled = report.spooled,
            dropped = report.dropped,
            spool_rows = self.spool().rows(),
            "audit writer stopped: queue flushed"
        );
        report
    }

    /// Fills `batch` up to [`WriterConfig::batch_rows`] for at most
    /// [`WriterConfig::linger`] after its first run. Looks at the queue every
    /// [`LINGER_STEP`] instead of waiting on it, so a run recorded meanwhile does not wake
    /// this task (a wake-up per run would cost the decision path a cross-thread
    /// notification each).
    async fn linger(&mut self, batch: &mut Vec<RunRecord>, closing: &CancellationToken) {
        let until = Instant::now() + self.cfg.linger;
        loop {
            while batch.len() < self.cfg.batch_rows {
                match self.rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            if batch.len() >= self.cfg.batch_rows || now >= until || closing.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep((until - now).min(LINGER_STEP)) => {}
                _ = closing.cancelled() => return,
            }
        }
    }

    fn spool(&self) -> &Spool {
        self.spool
            .as_ref()
            .expect("the spool is home between operations")
    }

    /// Runs `f` on the spool off the async threads (file I/O and fsync).
    async fn with_spool<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Spool) -> T + Send + 'static,
    ) -> T {
        let mut spool = self.spool.take().expect("the spool is home");
        let (spool, out) = tokio::task::spawn_blocking(move || {
            let out = f(&mut spool);
            (spool, out)
        })
        .await
        .expect("audit spool task");
        self.spool = Some(spool);
        self.publish_spool();
        out
    }

    fn publish_spool(&self) {
        let s = self.spool();
        self.metrics.audit_spool_rows.set(s.rows() as i64);
        self.metrics.audit_spool_bytes.set(s.bytes() as i64);
    }

    /// Takes the runs of `batch` off the queue's books, builds their rows and writes them.
    async fn write_records(&mut self, batch: &mut Vec<RunRecord>) {
        let n = batch.len();
        let bytes: usize = batch.iter().map(|r| r.event_json.len()).sum();
        self.health.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.metrics.audit_queue_depth.sub(n as i64);
        // Hashing, parsing and sealing off the runtime's workers, which serve decisions.
        let records = std::mem::replace(batch, Vec::with_capacity(self.cfg.batch_rows));
        let keys = self.keys.clone();
        let rows: Vec<AuditRow> = tokio::task::spawn_blocking(move || {
            records
                .iter()
                .map(|r| build_row(r, keys.as_ref()))
                .collect()
        })
        .await
        .expect("audit row building");
        self.write_rows(rows).await;
    }

    /// Writes `rows` to the database unless it is known down (or not reached yet since
    /// start); to the spool otherwise.
    async fn write_rows(&mut self, rows: Vec<AuditRow>) {
        if !self.health.db_down.load(Ordering::Relaxed)
            && !self.health.connecting.load(Ordering::Acquire)
        {
            match self.insert(&rows).await {
                Ok(inserted) => {
                    if self.flushing {
                        self.report.written += inserted;
                    }
                    return;
                }
                Err(e) => self.failed(&e, rows.len()),
            }
        }
        self.spool_rows(rows).await;
    }

    /// One insert under the write timeout, with the refused rows split off and dropped
    /// loudly. `Err` only when the database is unavailable.
    async fn insert(&mut self, rows: &[AuditRow]) -> Result<u64, WriteError> {
        let limit = if self.flushing {
            self.cfg.flush_write_timeout
        } else {
            self.cfg.write_timeout
        };
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(limit, self.target.write(rows)).await {
            Ok(r) => r,
            Err(_) => Err(WriteError::Unavailable(format!(
                "the audit database did not answer within {} ms",
                limit.as_millis()
            ))),
        };
        match result {
            Ok(inserted) => {
                self.metrics
                    .audit_batch_seconds
                    .observe(started.elapsed().as_secs_f64());
                self.metrics.audit_rows_written.inc_by(inserted);
                self.health.db_down.store(false, Ordering::Relaxed);
                Ok(inserted)
            }
            Err(WriteError::Refused(msg)) if rows.len() == 1 => {
                tracing::error!(
                    target: "security.hook.audit_write_failed",
                    dedup_key = %rows[0].dedup_key, error = %msg,
                    "the audit database refuses this row; it is dropped"
                );
                self.metrics.audit_write_failures.inc();
                self.health
                    .dropped(&self.metrics, 1, "the database refused the row");
                if self.flushing {
                    self.report.dropped += 1;
                }
                Ok(0)
            }
            Err(WriteError::Refused(_)) => {
                let (a, b) = rows.split_at(rows.len() / 2);
                let first = Box::pin(self.insert(a)).await?;
                let second = Box::pin(self.insert(b)).await?;
                Ok(first + second)
            }
            Err(e) => Err(e),
        }
    }

    /// Counts and logs a failed write; later batches spool until a replay succeeds.
    fn failed(&mut self, e: &WriteError, rows: usize) {
        self.metrics.audit_write_failures.inc();
        tracing::warn!(
            target: "security.hook.audit_write_failed",
            rows, error = %e, retry_in_ms = self.backoff.as_millis() as u64,
            "audit write failed: rows go to the spool and are written when the database answers"
        );
        self.health.db_down.store(true, Ordering::Relaxed);
        if self.next_retry.is_none() {
            self.next_retry = Some(Instant::now() + self.backoff);
        }
    }

    /// Appends `rows` to the spool as far as they fit; drops (counted, logged) only the
    /// rows the spool has no room for.
    async fn spool_rows(&mut self, rows: Vec<AuditRow>) {
        let n = rows.len();
        let result = self.with_spool(move |s| s.append(&rows)).await;
        let Appended {
            rows: spooled,
            refused,
            refused_min_bytes,
        } = match result {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(target: "security.hook.audit_write_failed", error = %e, rows = n, "cannot append to the audit spool");
                self.health
                    .dropped(&self.metrics, n as u64, "the audit spool cannot be written");
                if self.flushing {
                    self.report.dropped += n as u64;
                }
                return;
            }
        };
        if refused > 0 {
            self.health
                .spool_refused_row_bytes
                .store(refused_min_bytes, Ordering::Relaxed);
            self.health.spool_full.store(true, Ordering::Relaxed);
            self.health.dropped(
                &self.metrics,
                refused as u64,
                "the audit spool is full and the database unreachable",
            );
        } else {
            self.health.spool_full.store(false, Ordering::Relaxed);
        }
        if self.flushing {
            self.report.spooled += spooled as u64;
            self.report.dropped += refused as u64;
        }
        if spooled > 0 && self.next_retry.is_none() {
            self.next_retry = Some(Instant::now() + self.backoff);
        }
    }

    /// Replays the oldest spool file; deletes it once all its rows are written. On
    /// failure, backs off.
    async fn replay_one(&mut self) {
        if self.flushing {
            return;
        }
        if self.health.connecting.load(Ordering::Acquire) {
            // Never connected since start: the background connector owns that (a connect
            // here would hold the writer, and the runs queued behind it, for as long as
            // it takes to fail). Look again soon; replay once it answers.
            self.next_retry = Some(Instant::now() + self.cfg.retry_min);
            return;
        }
        let oldest = self.with_spool(|s| s.oldest()).await;
        let batch = match oldest {
            Ok(Some(b)) => b,
            Ok(None) => {
                // Nothing spooled: see whether the database answers (an empty write
                // connects if it never did); the next batch goes to it if so.
                if self.health.db_down.load(Ordering::Relaxed) && self.insert(&[]).await.is_err() {
                    self.back_off();
                    return;
                }
                self.next_retry = None;
                self.backoff = self.cfg.retry_min;
                self.health.db_down.store(false, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                tracing::error!(target: "security.hook.audit_write_failed", error = %e, "cannot read the audit spool");
                self.back_off();
                return;
            }
        };
        if batch.unreadable > 0 && self.unreadable_counted != Some(batch.seq) {
            self.unreadable_counted = Some(batch.seq);
            tracing::error!(
                target: "security.hook.audit_write_failed",
                seq = batch.seq, lines = batch.unreadable,
                "unreadable lines in the audit spool (a crash during an append): those rows are lost"
            );
            self.health
                .dropped(&self.metrics, batch.unreadable, "unreadable spool lines");
        }
        for chunk in batch.rows.chunks(self.cfg.batch_rows.max(1)) {
            if let Err(e) = self.insert(chunk).await {
                self.metrics.audit_write_failures.inc();
                tracing::warn!(
                    target: "security.hook.audit_write_failed",
                    spooled_rows = self.spool().rows(), error = %e, retry_in_ms = self.backoff.as_millis() as u64,
                    "audit spool replay failed; trying again later"
                );
                self.health.db_down.store(true, Ordering::Relaxed);
                self.back_off();
                return;
            }
        }
        let seq = batch.seq;
        let written = batch.rows.len();
        if let Err(e) = self.with_spool(move |s| s.remove(seq)).await {
            tracing::error!(target: "security.hook.audit_write_failed", error = %e, "cannot delete a replayed audit spool file (its rows are written; a replay would be deduplicated)");
        }
        self.health.spool_full.store(false, Ordering::Relaxed);
        self.backoff = self.cfg.retry_min;
        let left = self.spool().rows();
        tracing::info!(rows = written, left, "audit spool file replayed");
        self.next_retry = (!self.spool().is_empty()).then(Instant::now);
    }

    fn back_off(&mut self) {
        self.next_retry = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(self.cfg.retry_max);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::audit::build::tests::record;
    use crate::handlers::Outcome;

    /// A table in memory with the store's dedup rule, that can be "down" or refuse one
    /// dedup key.
    #[derive(Default)]
    struct Table {
        rows: Mutex<Vec<AuditRow>>,
        batches: Mutex<Vec<usize>>,
        down: AtomicBool,
        refuse: Mutex<Option<String>>,
    }

    impl Table {
        fn keys(&self) -> Vec<String> {
            self.rows
                .lock()
                .unwrap()
                .iter()
                .map(|r| r.dedup_key.clone())
                .collect()
        }
        fn batches(&self) -> Vec<usize> {
            self.batches.lock().unwrap().clone()
        }
    }

    impl AuditTarget for Table {
        fn write<'a>(&'a self, rows: &'a [AuditRow]) -> BoxFuture<'a, Result<u64, WriteError>> {
            Box::pin(async move {
                if self.down.load(Ordering::SeqCst) {
                    return Err(WriteError::Unavailable("connection refused".into()));
                }
                if let Some(k) = self.refuse.lock().unwrap().as_ref()
                    && rows.iter().any(|r| &r.dedup_key == k)
                {
                    return Err(WriteError::Refused("invalid byte sequence".into()));
                }
                let mut table = self.rows.lock().unwrap();
                let mut seen: HashSet<String> = table.iter().map(|r| r.dedup_key.clone()).collect();
                let mut n = 0;
                for r in rows {
                    if seen.insert(r.dedup_key.clone()) {
                        table.push(r.clone());
                        n += 1;
                    }
                }
                self.batches.lock().unwrap().push(rows.len());
                Ok(n)
            })
        }
    }

    fn cfg(batch_rows: usize, linger_ms: u64) -> WriterConfig {
        WriterConfig {
            batch_rows,
            linger: Duration::from_millis(linger_ms),
            retry_min: Duration::from_millis(20),
            retry_max: Duration::from_millis(100),
            ..Default::default()
        }
    }

    fn start_on(
        table: &Arc<Table>,
        dir: &std::path::Path,
        spool_max: u64,
        cfg: WriterConfig,
    ) -> (AuditSink, Metrics) {
        let metrics = Metrics::new();
        let sink = start_with(
            Arc::clone(table) as Arc<dyn AuditTarget>,
            Arc::new(OnceLock::new()),
            "sqlite",
            Arc::new(AuditHealth::default()),
            None,
            Spool::open(dir, spool_max).unwrap(),
            cfg,
            &metrics,
        );
        (sink, metrics)
    }

    fn send(sink: &AuditSink, range: std::ops::Range<usize>) {
        for i in range {
            sink.record(record(&format!("e{i}"), Outcome::Allow, None));
        }
    }

    fn keys(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("uid-h:e{i}")).collect()
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_full_batch_is_written_at_once_and_the_rest_waits_for_the_linger() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        let (sink, metrics) = start_on(&table, dir.path(), 1 << 20, cfg(10, 10_000));
        send(&sink, 0..25);
        until("two full batches", || table.keys().len() == 20).await;
        assert_eq!(table.batches(), [10, 10]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(table.keys().len(), 20, "5 rows wait for the 10 s linger");
        assert_eq!(metrics.audit_queue_depth.get(), 5);
        assert_eq!(sink.status().unwrap().queued_rows, 5);
        // Shutdown flushes them without waiting for the linger.
        let report = sink.shutdown(Duration::from_secs(5)).await;
        assert_eq!(table.keys(), keys(0..25));
        assert_eq!(table.batches(), [10, 10, 5]);
        assert_eq!(
            report,
            FlushReport {
                written: 5,
                ..Default::default()
            }
        );
        assert_eq!(metrics.audit_rows_written.get(), 25);
        assert_eq!(metrics.audit_queue_depth.get(), 0);
    }

    #[tokio::test]
    async fn a_partial_batch_is_written_after_the_linger() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        let (sink, _m) = start_on(&table, dir.path(), 1 << 20, cfg(500, 40));
        let t0 = std::time::Instant::now();
        send(&sink, 0..3);
        until("the lingering batch", || table.keys().len() == 3).await;
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(40) && took < Duration::from_secs(1),
            "{took:?}"
        );
        assert_eq!(table.batches(), [3]);
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn runs_recorded_after_shutdown_are_counted_as_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        let (sink, metrics) = start_on(&table, dir.path(), 1 << 20, cfg(500, 10_000));
        send(&sink, 0..7);
        let report = sink.shutdown(Duration::from_secs(5)).await;
        assert_eq!(report.written, 7);
        send(&sink, 7..8);
        assert_eq!(metrics.audit_rows_dropped.get(), 1);
        assert_eq!(sink.status().unwrap().state, "degraded");
        assert_eq!(table.keys(), keys(0..7));
        // A second shutdown has nothing to do.
        assert_eq!(
            sink.shutdown(Duration::from_secs(1)).await,
            FlushReport::default()
        );
    }

    #[tokio::test]
    async fn database_down_spools_then_replays_every_row_once() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        table.down.store(true, Ordering::SeqCst);
        let (sink, metrics) = start_on(&table, dir.path(), 1 << 20, cfg(10, 5));
        send(&sink, 0..30);
        until("30 spooled rows", || metrics.audit_spool_rows.get() == 30).await;
        assert!(metrics.audit_write_failures.get() >= 1);
        let st = sink.status().unwrap();
        assert_eq!((st.state, st.spool_rows), ("spooling", 30));
        assert!(table.keys().is_empty());

        table.down.store(false, Ordering::SeqCst);
        send(&sink, 30..40);
        until("every row written", || table.keys().len() == 40).await;
        until("an empty spool", || metrics.audit_spool_rows.get() == 0).await;
        let mut got = table.keys();
        got.sort();
        let mut want = keys(0..40);
        want.sort();
        assert_eq!(got, want, "each row exactly once");
        assert_eq!(metrics.audit_spool_bytes.get(), 0);
        assert_eq!(sink.status().unwrap().state, "ok");
        assert_eq!(metrics.audit_rows_dropped.get(), 0);
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .collect();
        assert!(files.is_empty(), "replayed files are deleted");
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn shutdown_with_the_database_down_spools_and_the_next_start_replays() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        table.down.store(true, Ordering::SeqCst);
        let (sink, _m) = start_on(&table, dir.path(), 1 << 20, cfg(500, 10_000));
        send(&sink, 0..12);
        let report = sink.shutdown(Duration::from_secs(5)).await;
        assert_eq!((report.written, report.spooled), (0, 12));
        assert!(!report.timed_out);
        drop(sink);

        table.down.store(false, Ordering::SeqCst);
        let (again, metrics) = start_on(&table, dir.path(), 1 << 20, cfg(500, 10_000));
        assert_eq!(metrics.audit_spool_rows.get(), 12, "found at start");
        until("the replay", || table.keys().len() == 12).await;
        assert_eq!(table.keys(), keys(0..12), "in the order they were recorded");
        until("an empty spool", || metrics.audit_spool_rows.get() == 0).await;
        again.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_full_spool_drops_loudly_and_readyz_says_degraded() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        table.down.store(true, Ordering::SeqCst);
        let one = crate::audit::build::build_row(&record("e0", Outcome::Allow, None), None);
        let line = serde_json::to_vec(&one).unwrap().len() as u64 + 1;
        // Room for about five rows.
        let (sink, metrics) = start_on(&table, dir.path(), line * 5 + line / 2, cfg(5, 5));
        send(&sink, 0..5);
        until("5 spooled", || metrics.audit_spool_rows.get() == 5).await;
        send(&sink, 5..10);
        until("5 dropped", || metrics.audit_rows_dropped.get() == 5).await;
        let st = sink.status().unwrap();
        assert_eq!(st.state, "degraded");
        assert!(st.reason.unwrap().contains("spool full"));
        assert_eq!(st.dropped_rows, 5);
        // The database returns: the spooled five are written, the spool is usable again.
        table.down.store(false, Ordering::SeqCst);
        until("the replay", || table.keys().len() == 5).await;
        assert_eq!(table.keys(), keys(0..5));
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_batch_is_spooled_as_far_as_it_fits_and_only_the_rest_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        table.down.store(true, Ordering::SeqCst);
        let one = crate::audit::build::build_row(&record("e0", Outcome::Allow, None), None);
        let line = serde_json::to_vec(&one).unwrap().len() as u64 + 1;
        let max = line * 7 + line / 2;
        // Room for seven and a half rows; batches of five.
        let (sink, metrics) = start_on(&table, dir.path(), max, cfg(5, 5));
        send(&sink, 0..5);
        until("5 spooled", || metrics.audit_spool_rows.get() == 5).await;
        send(&sink, 5..10);
        until("3 dropped", || metrics.audit_rows_dropped.get() == 3).await;
        assert_eq!(
            metrics.audit_spool_rows.get(),
            7,
            "two of the second batch fit"
        );
        assert_eq!(metrics.audit_spool_bytes.get() as u64, line * 7);
        let st = sink.status().unwrap();
        assert_eq!(
            (st.state, st.dropped_rows, st.spool_rows),
            ("degraded", 3, 7)
        );
        let reason = st.reason.unwrap();
        assert!(reason.contains("spool full"), "{reason}");
        assert!(
            reason.contains(&format!("{} of {max} bytes used", line * 7))
                && reason.contains(&format!("a {line}-byte row did not fit")),
            "{reason}"
        );
        // The database returns: the seven spooled rows are written.
        table.down.store(false, Ordering::SeqCst);
        until("the replay", || table.keys().len() == 7).await;
        assert_eq!(table.keys(), keys(0..7));
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_postgres_database_down_at_start_is_not_ok_and_rows_spool_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let config = AuditConfig {
            // A closed port: the pool keeps retrying for its 5 s acquire timeout.
            url: "postgres://u:pw@127.0.0.1:1/audit".into(),
            keys: None,
            spool_dir: dir.path().to_owned(),
            spool_max_bytes: 1 << 20,
            writer: cfg(500, 5),
        };
        let sink = start(config, &metrics).await.unwrap();
        let st = sink.status().unwrap();
        assert_eq!(st.state, "spooling", "not ok before the first connect");
        assert!(st.reason.unwrap().contains("not connected"));
        let t0 = std::time::Instant::now();
        send(&sink, 0..3);
        until("3 spooled", || metrics.audit_spool_rows.get() == 3).await;
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "spooled promptly, not after a connect timeout: {:?}",
            t0.elapsed()
        );
        assert_eq!(sink.status().unwrap().queued_rows, 0);
        let report = sink.shutdown(Duration::from_secs(5)).await;
        assert!(!report.timed_out);
    }

    #[tokio::test]
    async fn failed_connects_at_start_are_counted_and_the_spool_replays_once_connected() {
        use std::sync::atomic::AtomicUsize;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("audit.db");
        let spool_dir = dir.path().join("spool");
        let metrics = Metrics::new();
        let health = Arc::new(AuditHealth::default());
        health.db_down.store(true, Ordering::Relaxed);
        health.connecting.store(true, Ordering::Release);
        let cell = Arc::new(OnceLock::new());
        let target = Arc::new(LazyStore {
            url: format!("sqlite://{}", db.display()),
            cell: Arc::clone(&cell),
            connect_timeout: Duration::from_secs(5),
        });
        let sink = start_with(
            target,
            Arc::clone(&cell),
            "postgres",
            Arc::clone(&health),
            None,
            Spool::open(&spool_dir, 1 << 20).unwrap(),
            cfg(500, 5),
            &metrics,
        );
        let attempts = Arc::new(AtomicUsize::new(0));
        let up = Arc::new(AtomicBool::new(false));
        let url = format!("sqlite://{}", db.display());
        tokio::spawn(connect_until_up(
            {
                let (attempts, up) = (Arc::clone(&attempts), Arc::clone(&up));
                move || {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    let (up, url) = (up.load(Ordering::SeqCst), url.clone());
                    async move {
                        if up {
                            AuditStore::connect(&url).await
                        } else {
                            Err(StoreError::Connect {
                                backend: "postgres",
                                url: "postgres://u:***@127.0.0.1:1/audit".into(),
                                source: sqlx::Error::PoolTimedOut,
                            })
                        }
                    }
                }
            },
            Arc::clone(&cell),
            Arc::clone(&health),
            metrics.clone(),
            cfg(500, 5),
            "spool".into(),
        ));
        send(&sink, 0..4);
        until("4 spooled", || metrics.audit_spool_rows.get() == 4).await;
        until("3 failed attempts", || {
            health.connect_failures.load(Ordering::Relaxed) >= 3
        })
        .await;
        let st = sink.status().unwrap();
        assert_eq!(st.state, "spooling");
        let failed = health.connect_failures.load(Ordering::Relaxed);
        assert!(attempts.load(Ordering::SeqCst) as u64 >= failed);
        assert!(
            metrics.audit_write_failures.get() >= failed,
            "every failed connect is counted"
        );
        assert!(st.reason.unwrap().contains("connect attempts failed"));

        up.store(true, Ordering::SeqCst);
        until("connected", || sink.status().unwrap().state == "ok").await;
        until("an empty spool", || metrics.audit_spool_rows.get() == 0).await;
        assert_eq!(cell.get().unwrap().count().await.unwrap(), 4);
        // Later runs go straight to the database.
        send(&sink, 4..6);
        let store = cell.get().unwrap().clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.count().await.unwrap() < 6 {
            assert!(Instant::now() < deadline, "6 rows");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(metrics.audit_spool_rows.get(), 0);
        assert_eq!(metrics.audit_rows_dropped.get(), 0);
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_database_down_at_start_is_probed_until_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        table.down.store(true, Ordering::SeqCst);
        let metrics = Metrics::new();
        let health = Arc::new(AuditHealth::default());
        health.db_down.store(true, Ordering::Relaxed);
        let sink = start_with(
            Arc::clone(&table) as Arc<dyn AuditTarget>,
            Arc::new(OnceLock::new()),
            "postgres",
            health,
            None,
            Spool::open(dir.path(), 1 << 20).unwrap(),
            cfg(500, 5),
            &metrics,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(sink.status().unwrap().state, "spooling", "probes fail");
        table.down.store(false, Ordering::SeqCst);
        until("a probe that answers", || {
            sink.status().unwrap().state == "ok"
        })
        .await;
        // The next runs go straight to the database.
        send(&sink, 0..3);
        until("3 rows", || table.keys().len() == 3).await;
        assert_eq!(metrics.audit_spool_rows.get(), 0);
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_row_the_database_refuses_is_split_off_and_the_rest_written() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        *table.refuse.lock().unwrap() = Some("uid-h:e5".into());
        let (sink, metrics) = start_on(&table, dir.path(), 1 << 20, cfg(8, 10_000));
        send(&sink, 0..8);
        until("7 rows", || table.keys().len() == 7).await;
        let mut want = keys(0..8);
        want.retain(|k| k != "uid-h:e5");
        assert_eq!(table.keys(), want);
        assert_eq!(metrics.audit_rows_dropped.get(), 1);
        assert_eq!(metrics.audit_spool_rows.get(), 0, "nothing spooled");
        sink.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_full_queue_drops_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(Table::default());
        let mut c = cfg(500, 10_000);
        c.queue_rows = 4;
        let (sink, metrics) = start_on(&table, dir.path(), 1 << 20, c);
        // The writer holds the first run in its lingering batch at most; the queue takes 4.
        send(&sink, 0..20);
        assert!(metrics.audit_rows_dropped.get() >= 15);
        let report = sink.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            report.written + metrics.audit_rows_dropped.get(),
            20,
            "every run is written or counted"
        );
    }
}
