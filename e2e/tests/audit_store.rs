//! The audit store's query tests (issue 5 points 1–2, "the same query tests run against
//! SQLite and PostgreSQL"): every case below runs twice, in `sqlite::` against a temp file
//! and in `postgres::` against a real PostgreSQL from Debian's package, started by
//! `agenthooks_e2e::postgres::PgServer` (one server per test binary, one database per test).
//! No Kubernetes needed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};

use agenthooks_crds::event::HookEvent;
use agenthooks_dispatcher::audit::error_detail::ErrorDetailKey;
use agenthooks_dispatcher::audit::row::{AuditMetadata, AuditRow, dedup_key};
use agenthooks_dispatcher::audit::store::{
    AuditStore, Cursor, ExecutionParams, ExecutionQuery, HookRef, StoreError,
};
use agenthooks_dispatcher::handlers::Outcome;
use agenthooks_e2e::postgres::PgServer;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde_json::json;

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty store and the URL it was opened with (the temp dir lives as long).
struct Db {
    store: AuditStore,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The URL of a fresh, empty database (a temp file, or a new PostgreSQL database).
async fn fresh_url(backend: Backend) -> (String, Option<tempfile::TempDir>) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("audit.db");
            assert!(!path.exists());
            (format!("sqlite://{}", path.display()), Some(dir))
        }
        Backend::Postgres => {
            let url = tokio::task::spawn_blocking(move || {
                PgServer::shared()
                    .create_database(&format!("audit_{}_{n}", std::process::id()))
                    .unwrap()
            })
            .await
            .unwrap();
            (url, None)
        }
    }
}

async fn open(backend: Backend) -> Db {
    let (url, dir) = fresh_url(backend).await;
    let store = AuditStore::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    Db {
        store,
        url,
        _dir: dir,
    }
}

/// 2026-11-30T06:00:00Z plus `secs` seconds and `micros` microseconds.
fn at(secs: i64, micros: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T06:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + ChronoDuration::seconds(secs)
        + ChronoDuration::microseconds(micros)
}

/// A row of hook `ns/name` (uid `uid`) for event `evt`.
fn row(
    uid: &str,
    ns: &str,
    name: &str,
    evt: &str,
    decision: Outcome,
    created_at: DateTime<Utc>,
) -> AuditRow {
    AuditRow {
        id: None,
        hook_uid: uid.into(),
        hook_namespace: ns.into(),
        hook_name: name.into(),
        tenant: "acme".into(),
        session_id: "sess-1".into(),
        event: HookEvent::PreToolUse,
        input_hash: "ab".repeat(32),
        decision,
        duration_ms: 12,
        dedup_key: dedup_key(uid, evt),
        error: None,
        error_detail: None,
        metadata: json!({"matcher_matched": true}),
        created_at,
    }
}

/// `n` allow rows of hook team-a/h (uid u), events `<prefix>-0..n`, one second apart.
fn rows(prefix: &str, n: usize) -> Vec<AuditRow> {
    (0..n)
        .map(|i| {
            row(
                "u",
                "team-a",
                "h",
                &format!("{prefix}-{i}"),
                Outcome::Allow,
                at(i as i64, 0),
            )
        })
        .collect()
}

fn ids(rows: &[AuditRow]) -> Vec<i64> {
    rows.iter()
        .map(|r| r.id.expect("rows come back with ids"))
        .collect()
}

fn events(rows: &[AuditRow]) -> Vec<String> {
    rows.iter()
        .map(|r| r.dedup_key.split_once(':').unwrap().1.to_owned())
        .collect()
}

fn query(f: impl FnOnce(&mut ExecutionQuery)) -> ExecutionQuery {
    let mut q = ExecutionQuery::default();
    f(&mut q);
    q
}

fn hook(s: &str) -> Option<HookRef> {
    Some(HookRef::parse(s).unwrap())
}

async fn migrations_run_at_connect_and_twice_is_harmless(db: Db) {
    let again = AuditStore::connect(&db.url).await.expect("second connect");
    assert_eq!(again.backend(), db.store.backend());
    assert_eq!(db.store.count().await.unwrap(), 0);
    assert_eq!(db.store.insert_batch(&rows("m", 1)).await.unwrap(), 1);
    assert_eq!(again.count().await.unwrap(), 1, "both see the same table");
    let third = AuditStore::connect(&db.url).await.expect("third connect");
    let applied: Vec<i64> = match &third {
        AuditStore::Sqlite(p) => {
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(p)
                .await
                .unwrap()
        }
        AuditStore::Postgres(p) => {
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(p)
                .await
                .unwrap()
        }
    };
    // PostgreSQL's 0004 trades its indexes for cheaper ones (issue 15 goal 7); SQLite
    // keeps 0002's. Both take `ask` in 0003 (issue 16).
    let expected = match &third {
        AuditStore::Sqlite(_) => vec![1, 2, 3],
        AuditStore::Postgres(_) => vec![1, 2, 3, 4],
    };
    assert_eq!(applied, expected, "each migration recorded once");
    assert_eq!(
        third.count().await.unwrap(),
        1,
        "reconnecting keeps the rows"
    );
}

async fn insert_batch_inserts_and_counts(db: Db) {
    let s = &db.store;
    assert_eq!(s.insert_batch(&[]).await.unwrap(), 0);
    assert_eq!(s.insert_batch(&rows("a", 3)).await.unwrap(), 3);
    // Larger than one SQLite multi-row INSERT (500) and than the 1,000 rows a batch may hold.
    let big = rows("big", 1_200);
    let started = std::time::Instant::now();
    assert_eq!(s.insert_batch(&big).await.unwrap(), 1_200);
    eprintln!(
        "[{}] 1,200-row batch inserted in {:?}",
        s.backend(),
        started.elapsed()
    );
    assert_eq!(s.count().await.unwrap(), 1_203);
    let page = s.list(&query(|q| q.limit = 500)).await.unwrap();
    assert_eq!(page.rows.len(), 500);
    assert_eq!(
        page.rows[0].dedup_key, "u:big-1199",
        "last row of the batch is newest"
    );
}

async fn the_same_dedup_key_is_one_row(db: Db) {
    let s = &db.store;
    let first = row("u1", "ns", "h", "evt-1", Outcome::Block, at(0, 0));
    let mut retry = first.clone();
    retry.decision = Outcome::Allow; // a replay never overwrites the stored row
    retry.created_at = at(5, 0);
    // Within one batch.
    assert_eq!(
        s.insert_batch(&[first.clone(), retry.clone()])
            .await
            .unwrap(),
        1
    );
    // Across batches, alone and mixed with new rows.
    assert_eq!(s.insert_batch(&[retry.clone()]).await.unwrap(), 0);
    let new = row("u1", "ns", "h", "evt-2", Outcome::Allow, at(6, 0));
    let other_hook_same_event = row("u2", "ns", "h2", "evt-1", Outcome::Allow, at(7, 0));
    assert_eq!(
        s.insert_batch(&[retry, new, other_hook_same_event])
            .await
            .unwrap(),
        2
    );
    assert_eq!(s.count().await.unwrap(), 3);
    let page = s.list(&query(|q| q.hook = hook("ns/h"))).await.unwrap();
    assert_eq!(events(&page.rows), vec!["evt-2", "evt-1"]);
    let kept = &page.rows[1];
    assert_eq!(kept.decision, Outcome::Block, "the first write wins");
    assert_eq!(kept.created_at, at(0, 0));
}

/// A reused `event_id` (same hook, another tenant/session/input) is not a retry: its run
/// is kept under `<dedup_key>#<16 hex>`, and replays of it are still skipped.
async fn a_reused_event_id_from_another_event_still_leaves_its_row(db: Db) {
    use agenthooks_dispatcher::audit::store::reused_event_key;
    let s = &db.store;
    let first = row("u1", "ns", "h", "dup-1", Outcome::Allow, at(0, 0));
    let mut other_tenant = first.clone();
    other_tenant.tenant = "other".into();
    other_tenant.session_id = "evil".into();
    other_tenant.input_hash = "cd".repeat(32);
    other_tenant.decision = Outcome::Block;
    let mut other_input = first.clone();
    other_input.input_hash = "ef".repeat(32);
    // A true retry of `first` (decision differs: still the same event).
    let mut retry = first.clone();
    retry.decision = Outcome::Timeout;

    // In one batch: the first, a retry of it, and two different events with its key.
    let batch = [
        first.clone(),
        retry.clone(),
        other_tenant.clone(),
        other_input.clone(),
    ];
    assert_eq!(s.insert_batch(&batch).await.unwrap(), 3);
    // Replaying the whole batch (a spool replay) writes nothing more.
    assert_eq!(s.insert_batch(&batch).await.unwrap(), 0);
    // Across batches too.
    let mut later = first.clone();
    later.session_id = "sess-2".into();
    assert_eq!(s.insert_batch(&[later.clone()]).await.unwrap(), 1);
    assert_eq!(s.insert_batch(&[later.clone()]).await.unwrap(), 0);
    assert_eq!(s.count().await.unwrap(), 4);

    let page = s.list(&query(|q| q.hook = hook("ns/h"))).await.unwrap();
    let mut keys: Vec<(String, String, &str)> = page
        .rows
        .iter()
        .map(|r| (r.dedup_key.clone(), r.tenant.clone(), r.decision.as_str()))
        .collect();
    keys.sort();
    let key_of = |r: &AuditRow| reused_event_key(r);
    let mut want = vec![
        ("u1:dup-1".to_string(), "acme".to_string(), "allow"),
        (key_of(&other_tenant), "other".into(), "block"),
        (key_of(&other_input), "acme".into(), "allow"),
        (key_of(&later), "acme".into(), "allow"),
    ];
    want.sort();
    assert_eq!(keys, want);
    let k = key_of(&other_tenant);
    assert!(
        k.starts_with("u1:dup-1#") && k.len() == "u1:dup-1#".len() + 16,
        "{k}"
    );
    assert_ne!(key_of(&other_tenant), key_of(&other_input));
}

async fn list_is_newest_first_with_ids(db: Db) {
    let s = &db.store;
    s.insert_batch(&rows("a", 3)).await.unwrap();
    s.insert_batch(&rows("b", 2)).await.unwrap();
    let page = s.list(&ExecutionQuery::default()).await.unwrap();
    assert_eq!(events(&page.rows), vec!["b-1", "b-0", "a-2", "a-1", "a-0"]);
    let got = ids(&page.rows);
    assert!(
        got.windows(2).all(|w| w[0] > w[1]),
        "ids strictly descending: {got:?}"
    );
    assert_eq!(page.next_cursor, None, "one page holds everything");
}

async fn filters_by_namespace_hook_decision_since_and_combined(db: Db) {
    let s = &db.store;
    let batch = vec![
        row("ua", "team-a", "x", "1", Outcome::Allow, at(0, 0)),
        row("ua", "team-a", "x", "2", Outcome::Block, at(10, 0)),
        row("ub", "team-a", "y", "3", Outcome::Block, at(20, 0)),
        row("uc", "team-b", "x", "4", Outcome::Block, at(30, 0)),
        row("ua", "team-a", "x", "5", Outcome::Timeout, at(40, 0)),
        row("ua", "team-a", "x", "6", Outcome::Block, at(50, 1)),
        row("ud", "team-a", "xx", "7", Outcome::Block, at(60, 0)),
        row("ue", "team-a/x", "", "8", Outcome::Block, at(70, 0)),
    ];
    assert_eq!(s.insert_batch(&batch).await.unwrap(), 8);
    let list = |q: ExecutionQuery| async move { events(&s.list(&q).await.unwrap().rows) };

    assert_eq!(
        list(query(|q| q.hook = hook("team-a/x"))).await,
        vec!["6", "5", "2", "1"],
        "namespace and name both match, exactly"
    );
    assert_eq!(list(query(|q| q.hook = hook("team-b/x"))).await, vec!["4"]);
    // A namespace: every hook of it, exactly (not "team-a/x", not team-b).
    let ns = |n: &str| Some(n.to_string());
    assert_eq!(
        list(query(|q| q.namespace = ns("team-a"))).await,
        vec!["7", "6", "5", "3", "2", "1"]
    );
    assert_eq!(list(query(|q| q.namespace = ns("team-b"))).await, vec!["4"]);
    assert_eq!(
        list(query(|q| q.namespace = ns("team-c"))).await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(query(|q| {
            q.namespace = ns("team-a");
            q.hook = hook("team-a/x");
        }))
        .await,
        vec!["6", "5", "2", "1"]
    );
    assert_eq!(
        list(query(|q| {
            q.namespace = ns("team-a");
            q.decision = Some(Outcome::Block);
            q.limit = 2;
        }))
        .await,
        vec!["7", "6"]
    );
    // Pages of one namespace hold only its rows, in order.
    let first = s
        .list(&query(|q| {
            q.namespace = ns("team-a");
            q.limit = 4;
        }))
        .await
        .unwrap();
    assert_eq!(events(&first.rows), vec!["7", "6", "5", "3"]);
    let cursor = Cursor::parse(first.next_cursor.as_deref().unwrap()).unwrap();
    let next = s
        .list(&query(|q| {
            q.namespace = ns("team-a");
            q.limit = 4;
            q.cursor = Some(cursor);
        }))
        .await
        .unwrap();
    assert_eq!(
        (events(&next.rows), next.next_cursor),
        (vec!["2".to_string(), "1".to_string()], None)
    );
    // A namespace and a hook of another: refused before the database is asked.
    let e = s
        .list(&query(|q| {
            q.namespace = ns("team-b");
            q.hook = hook("team-a/x");
        }))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Query(q) if q.field == "namespace"),
        "{e}"
    );
    assert_eq!(
        list(query(|q| q.hook = hook("team-c/x"))).await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(query(|q| q.decision = Some(Outcome::Block))).await,
        vec!["8", "7", "6", "4", "3", "2"]
    );
    assert_eq!(
        list(query(|q| q.decision = Some(Outcome::Error))).await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(query(|q| q.since = Some(at(40, 0)))).await,
        vec!["8", "7", "6", "5"],
        "since is inclusive"
    );
    assert_eq!(
        list(query(|q| q.since = Some(at(50, 1)))).await,
        vec!["8", "7", "6"],
        "microseconds count"
    );
    assert_eq!(
        list(query(|q| q.since = Some(at(50, 2)))).await,
        vec!["8", "7"]
    );
    // A `since` in another offset means the same instant.
    let plus_two = DateTime::parse_from_rfc3339("2026-11-30T08:01:00+02:00").unwrap();
    assert_eq!(
        list(query(|q| q.since = Some(plus_two.with_timezone(&Utc)))).await,
        vec!["8", "7"]
    );
    assert_eq!(
        list(query(|q| {
            q.hook = hook("team-a/x");
            q.decision = Some(Outcome::Block);
            q.since = Some(at(5, 0));
        }))
        .await,
        vec!["6", "2"]
    );
    // The same through the HTTP parameters.
    let q = ExecutionQuery::from_params(&ExecutionParams {
        namespace: None,
        hook: Some("team-a/x".into()),
        decision: Some("block".into()),
        since: Some("2026-11-30T06:00:05Z".into()),
        limit: Some("1".into()),
        cursor: None,
    })
    .unwrap();
    let page = s.list(&q).await.unwrap();
    assert_eq!(events(&page.rows), vec!["6"]);
    let q2 = ExecutionQuery {
        cursor: Some(Cursor::parse(page.next_cursor.as_deref().unwrap()).unwrap()),
        ..q
    };
    let page2 = s.list(&q2).await.unwrap();
    assert_eq!(events(&page2.rows), vec!["2"]);
    assert_eq!(page2.next_cursor, None);
}

async fn limit_edges(db: Db) {
    let s = &db.store;
    s.insert_batch(&rows("r", 600)).await.unwrap();
    let one = s.list(&query(|q| q.limit = 1)).await.unwrap();
    assert_eq!(events(&one.rows), vec!["r-599"]);
    assert!(one.next_cursor.is_some());

    let first = s.list(&query(|q| q.limit = 500)).await.unwrap();
    assert_eq!(first.rows.len(), 500);
    assert_eq!(first.rows[499].dedup_key, "u:r-100");
    let cursor = Cursor::parse(first.next_cursor.as_deref().unwrap()).unwrap();
    let rest = s
        .list(&query(|q| {
            q.limit = 500;
            q.cursor = Some(cursor);
        }))
        .await
        .unwrap();
    assert_eq!(rest.rows.len(), 100);
    assert_eq!(rest.rows[99].dedup_key, "u:r-0");
    assert_eq!(rest.next_cursor, None, "no cursor after the last page");

    // Exactly `limit` rows left: no empty trailing page.
    let exact = s.list(&query(|q| q.limit = 100)).await.unwrap();
    assert!(exact.next_cursor.is_some());
    let tail = s
        .list(&query(|q| {
            q.limit = 100;
            q.cursor = Cursor::after_row(ids(&rest.rows)[0] + 1);
        }))
        .await
        .unwrap();
    assert_eq!(tail.rows.len(), 100);
    assert_eq!(tail.next_cursor, None);

    // Validation lives in ExecutionQuery::validate: from_params (the HTTP API) and
    // AuditStore::list both refuse 0 and 501, naming `limit`.
    for bad in [0u32, 501, u32::MAX] {
        let e = s.list(&query(|q| q.limit = bad)).await.unwrap_err();
        match e {
            StoreError::Query(q) => {
                assert_eq!(q.field, "limit");
                assert_eq!(
                    q.to_string(),
                    format!("limit: must be from 1 to 500, got {bad}")
                );
            }
            other => panic!("expected a query error, got {other}"),
        }
        let e = ExecutionQuery::from_params(&ExecutionParams {
            limit: Some(bad.to_string()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "limit");
    }
}

async fn cursor_pages_see_every_old_row_once_while_rows_arrive(db: Db) {
    let s = &db.store;
    s.insert_batch(&rows("old", 25)).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = s
            .list(&query(|q| {
                q.limit = 10;
                q.cursor = cursor;
            }))
            .await
            .unwrap();
        pages += 1;
        seen.extend(events(&page.rows));
        // New rows between pages (and a replay of an old one).
        let mut fresh = rows(&format!("new{pages}"), 3);
        fresh.push(rows("old", 1).remove(0));
        assert_eq!(s.insert_batch(&fresh).await.unwrap(), 3);
        match page.next_cursor {
            Some(c) => cursor = Some(Cursor::parse(&c).unwrap()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).rev().map(|i| format!("old-{i}")).collect();
    assert_eq!(
        seen, want,
        "every old row exactly once, newest first, no new rows"
    );
    assert_eq!(s.count().await.unwrap(), 25 + 9);

    // A filtered walk works the same way.
    let mut seen = HashSet::new();
    let mut cursor = None;
    loop {
        let page = s
            .list(&query(|q| {
                q.hook = hook("team-a/h");
                q.limit = 7;
                q.cursor = cursor;
            }))
            .await
            .unwrap();
        for e in events(&page.rows) {
            assert!(seen.insert(e.clone()), "{e} twice");
        }
        match page.next_cursor {
            Some(c) => cursor = Some(Cursor::parse(&c).unwrap()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 34);
}

async fn bad_cursors_are_refused_naming_cursor(db: Db) {
    for bad in ["", "garbage!", "djI6NQ", "djE6LTE", "djE6MA"] {
        let e = ExecutionQuery::from_params(&ExecutionParams {
            cursor: Some(bad.into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "cursor", "{bad:?}: {e}");
        assert!(e.to_string().starts_with("cursor: "), "{e}");
    }
    // A well-formed cursor before every row: an empty last page.
    db.store.insert_batch(&rows("c", 3)).await.unwrap();
    let page = db
        .store
        .list(&query(|q| q.cursor = Cursor::after_row(1)))
        .await
        .unwrap();
    assert!(page.rows.is_empty());
    assert_eq!(page.next_cursor, None);
}

async fn get_by_id(db: Db) {
    let s = &db.store;
    s.insert_batch(&rows("g", 3)).await.unwrap();
    let page = s.list(&ExecutionQuery::default()).await.unwrap();
    for r in &page.rows {
        let got = s.get(r.id.unwrap()).await.unwrap().expect("row by id");
        assert_eq!(&got, r);
    }
    let max = ids(&page.rows)[0];
    assert_eq!(s.get(max + 1).await.unwrap(), None);
    assert_eq!(s.get(0).await.unwrap(), None);
    assert_eq!(s.get(-7).await.unwrap(), None);
    assert_eq!(s.get(i64::MAX).await.unwrap(), None);
}

async fn metadata_and_error_detail_round_trip(db: Db) {
    let s = &db.store;
    let key = ErrorDetailKey::generate("key-2026-11").unwrap();
    let full =
        "HTTP 500 from https://hooks.example/x: bearer abc.def for bob@example.com — ünïcödé";
    let mut r = row(
        "uid-7",
        "team-a",
        "deny-rm",
        "evt-9",
        Outcome::Error,
        at(3, 123_456),
    );
    r.event = HookEvent::SubagentStart;
    r.duration_ms = 5_000;
    r.tenant = "tenant-ü".into();
    r.error = Some("HTTP 500 from https://hooks.example/x: bearer [REDACTED]".into());
    r.error_detail = Some(key.seal(full, &r.dedup_key));
    let mut meta = AuditMetadata {
        matcher_matched: Some(true),
        cel_eval_result: Some(false),
        http_status: Some(500),
        prompt_model: Some("claude-sonnet".into()),
        prompt_tokens: Some(1_234),
        injection_detected: Some(false),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        ..Default::default()
    }
    .to_value();
    meta["extra"] = json!({"nested": [1, 2.5, null, "x", {"deep": true}], "empty": {}});
    r.metadata = meta;
    let plain = row(
        "uid-7",
        "team-a",
        "deny-rm",
        "evt-10",
        Outcome::Allow,
        at(4, 0),
    );
    assert_eq!(
        s.insert_batch(&[r.clone(), plain.clone()]).await.unwrap(),
        2
    );

    let page = s.list(&ExecutionQuery::default()).await.unwrap();
    let (got_plain, got) = (&page.rows[0], &page.rows[1]);
    let mut want = r.clone();
    want.id = got.id;
    assert_eq!(got, &want);
    let mut want_plain = plain.clone();
    want_plain.id = got_plain.id;
    assert_eq!(got_plain, &want_plain);
    assert_eq!(got_plain.error_detail, None);
    let detail = got.error_detail.as_ref().unwrap();
    assert_eq!(detail.key_id, "key-2026-11");
    assert_eq!(key.open(detail, &got.dedup_key).unwrap(), full);
    assert_eq!(s.get(got.id.unwrap()).await.unwrap().as_ref(), Some(got));

    // What is stored: ciphertext and key id, never the plain error.
    let (ct, kid): (String, String) = match s {
        AuditStore::Sqlite(p) => sqlx::query_as(
            "SELECT error_detail, error_detail_key_id FROM hook_executions WHERE dedup_key = 'uid-7:evt-9'",
        )
        .fetch_one(p)
        .await
        .unwrap(),
        AuditStore::Postgres(p) => sqlx::query_as(
            "SELECT error_detail, error_detail_key_id FROM hook_executions WHERE dedup_key = 'uid-7:evt-9'",
        )
        .fetch_one(p)
        .await
        .unwrap(),
    };
    assert_eq!(kid, "key-2026-11");
    assert!(
        !ct.contains("bob@example.com") && !ct.contains("bearer"),
        "{ct}"
    );
}

async fn rows_of_a_deleted_hook_stay_listed(db: Db) {
    let s = &db.store;
    // The hook team-a/gone ran (uid old), was deleted and re-created (uid new), then
    // deleted again: nothing serves it anymore, its rows stay with both uids.
    s.insert_batch(&[
        row("old-uid", "team-a", "gone", "1", Outcome::Block, at(0, 0)),
        row("old-uid", "team-a", "gone", "2", Outcome::Allow, at(1, 0)),
        row("other", "team-a", "kept", "3", Outcome::Allow, at(2, 0)),
        row("new-uid", "team-a", "gone", "4", Outcome::Allow, at(3, 0)),
    ])
    .await
    .unwrap();
    let page = s
        .list(&query(|q| q.hook = hook("team-a/gone")))
        .await
        .unwrap();
    let uids: Vec<&str> = page.rows.iter().map(|r| r.hook_uid.as_str()).collect();
    assert_eq!(uids, vec!["new-uid", "old-uid", "old-uid"]);
    assert_eq!(events(&page.rows), vec!["4", "2", "1"]);
}

async fn a_reader_and_a_writer_work_concurrently(db: Db) {
    let writer_store = db.store.clone();
    let writer = tokio::spawn(async move {
        for b in 0..20 {
            let n = writer_store
                .insert_batch(&rows(&format!("w{b}"), 50))
                .await
                .unwrap();
            assert_eq!(n, 50);
        }
    });
    let mut reads = 0;
    let mut last = 0;
    while !writer.is_finished() {
        let page = db.store.list(&query(|q| q.limit = 20)).await.unwrap();
        let n = db.store.count().await.unwrap();
        assert!(n >= last, "count never goes back: {n} < {last}");
        assert!(page.rows.len() as u64 <= n.max(20));
        last = n;
        reads += 1;
    }
    writer.await.unwrap();
    assert_eq!(db.store.count().await.unwrap(), 1_000);
    assert!(reads > 0);
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::open(super::Backend::Sqlite).await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::open(super::Backend::Postgres).await).await;
                }
            )*
        }
    };
}

on_both_backends!(
    migrations_run_at_connect_and_twice_is_harmless,
    insert_batch_inserts_and_counts,
    the_same_dedup_key_is_one_row,
    a_reused_event_id_from_another_event_still_leaves_its_row,
    list_is_newest_first_with_ids,
    filters_by_namespace_hook_decision_since_and_combined,
    limit_edges,
    cursor_pages_see_every_old_row_once_while_rows_arrive,
    bad_cursors_are_refused_naming_cursor,
    get_by_id,
    metadata_and_error_detail_round_trip,
    rows_of_a_deleted_hook_stay_listed,
    a_reader_and_a_writer_work_concurrently,
);

/// A database made by the migrations from before `ask` (0001 and 0002), holding rows:
/// connecting runs 0003, which keeps every row with its id, and then `ask` rows are taken
/// and listed by `decision=ask` (issue 16).
async fn an_older_database_upgrades_keeping_its_rows(backend: Backend) {
    let (url, _dir) = fresh_url(backend).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dispatcher/migrations")
        .join(match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        });
    let before_ask = tempfile::tempdir().unwrap();
    for f in ["0001_hook_executions.sql", "0002_hook_namespace_index.sql"] {
        std::fs::copy(dir.join(f), before_ask.path().join(f)).unwrap();
    }
    let old = sqlx::migrate::Migrator::new(before_ask.path())
        .await
        .unwrap();
    let mut kept = rows("old", 3);
    kept[1].decision = Outcome::Block;
    let old_store = match backend {
        Backend::Sqlite => {
            let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
            let pool = sqlx::SqlitePool::connect_with(opts.create_if_missing(true))
                .await
                .unwrap();
            old.run(&pool).await.unwrap();
            AuditStore::Sqlite(pool)
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            old.run(&pool).await.unwrap();
            AuditStore::Postgres(pool)
        }
    };
    assert_eq!(old_store.insert_batch(&kept).await.unwrap(), 3);
    let mut asked = row("u", "team-a", "h", "asked", Outcome::Ask, at(10, 0));
    assert!(
        old_store.insert_batch(&[asked.clone()]).await.is_err(),
        "the old schema refuses ask"
    );
    let before = old_store.list(&query(|q| q.limit = 10)).await.unwrap().rows;
    drop(old_store);

    let store = AuditStore::connect(&url).await.expect("upgrade");
    let after = store.list(&query(|q| q.limit = 10)).await.unwrap().rows;
    assert_eq!(ids(&after), ids(&before), "every row kept with its id");
    assert_eq!(
        after.iter().map(|r| r.decision).collect::<Vec<_>>(),
        [Outcome::Allow, Outcome::Block, Outcome::Allow]
    );
    asked.created_at = at(11, 0);
    assert_eq!(store.insert_batch(&[asked]).await.unwrap(), 1);
    let asks = store
        .list(&query(|q| q.decision = Some(Outcome::Ask)))
        .await
        .unwrap()
        .rows;
    assert_eq!(events(&asks), ["asked"]);
    assert!(
        asks[0].id.unwrap() > ids(&before)[0],
        "ids go on after the kept rows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_sqlite_database_upgrades_keeping_its_rows() {
    an_older_database_upgrades_keeping_its_rows(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_postgres_database_upgrades_keeping_its_rows() {
    an_older_database_upgrades_keeping_its_rows(Backend::Postgres).await;
}

/// The indexes of `hook_executions` (PostgreSQL), sorted by name.
async fn pg_indexes(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'hook_executions' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Issue 15 goal 7: migration 0004 on a database that already holds rows (written at
/// migration 0002) keeps every row and leaves 3 btrees per row, a partial btree for the
/// rare decisions and a BRIN on `created_at`; then each history query shape is served by
/// an index (EXPLAIN names it), not by reading the whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_3_keeps_rows_and_every_query_has_its_index() {
    let url = tokio::task::spawn_blocking(|| {
        PgServer::shared()
            .create_database(&format!("audit_upgrade_{}", std::process::id()))
            .unwrap()
    })
    .await
    .unwrap();
    // The database as a build with migrations 0001 and 0002 left it.
    let old = tempfile::tempdir().unwrap();
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dispatcher/migrations/postgres");
    for f in ["0001_hook_executions.sql", "0002_hook_namespace_index.sql"] {
        std::fs::copy(dir.join(f), old.path().join(f)).unwrap();
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(old.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    assert_eq!(
        pg_indexes(&pool).await,
        [
            "hook_executions_created_at_idx",
            "hook_executions_decision_idx",
            "hook_executions_dedup_key_key",
            "hook_executions_hook_idx",
            "hook_executions_namespace_idx",
            "hook_executions_pkey",
        ]
    );
    sqlx::query(
        "INSERT INTO hook_executions (hook_uid, hook_namespace, hook_name, tenant, session_id, \
         event, input_hash, decision, duration_ms, dedup_key, created_at) VALUES \
         ('u', 'team-a', 'x', 't', 's', 'pre_tool_use', 'h', 'allow', 1, 'u:old-1', '2026-11-30T06:00:00Z'), \
         ('u', 'team-a', 'x', 't', 's', 'pre_tool_use', 'h', 'block', 1, 'u:old-2', '2026-11-30T06:00:01Z')",
    )
    .execute(&pool)
    .await
    .unwrap();

    let store = AuditStore::connect(&url).await.unwrap();
    assert_eq!(
        pg_indexes(&pool).await,
        [
            "hook_executions_created_at_brin",
            "hook_executions_dedup_key_key",
            "hook_executions_namespace_id_idx",
            "hook_executions_pkey",
            "hook_executions_rare_decision_idx",
        ]
    );
    assert_eq!(store.count().await.unwrap(), 2, "no stored row lost");
    let blocks = store
        .list(&query(|q| q.decision = Some(Outcome::Block)))
        .await
        .unwrap();
    assert_eq!(events(&blocks.rows), ["old-2"]);

    // 20,000 rows: 4 namespaces of 5 hooks, and 1 in 1,000 in namespace "rare" (hook "r");
    // 1 in 100 a block, 1 in 1,000 an error.
    for chunk in 0..10 {
        let batch: Vec<AuditRow> = (0..2_000)
            .map(|j| {
                let i = chunk * 2_000 + j;
                let decision = match i {
                    _ if i % 100 == 0 => Outcome::Block,
                    _ if i % 1_000 == 1 => Outcome::Error,
                    _ => Outcome::Allow,
                };
                let (ns, name) = match i {
                    _ if i % 1_000 == 7 => ("rare".to_owned(), "r".to_owned()),
                    _ => (format!("ns-{}", i % 4), format!("h-{}", i % 5)),
                };
                row(
                    "u",
                    &ns,
                    &name,
                    &format!("e-{i}"),
                    decision,
                    at(i as i64, 0),
                )
            })
            .collect();
        assert_eq!(store.insert_batch(&batch).await.unwrap(), 2_000);
    }
    sqlx::query("ANALYZE hook_executions")
        .execute(&pool)
        .await
        .unwrap();
    // The shapes of push_list_sql (dispatcher/src/audit/store/mod.rs), newest first, where
    // the filter keeps few rows (a common value is found sooner by walking the primary key
    // newest first, and the planner rightly does that).
    for (filter, index) in [
        (
            "hook_namespace = 'rare'",
            "hook_executions_namespace_id_idx",
        ),
        (
            "hook_namespace = 'rare' AND hook_name = 'r'",
            "hook_executions_namespace_id_idx",
        ),
        (
            "hook_namespace = 'ns-1' AND hook_name = 'gone'",
            "hook_executions_namespace_id_idx",
        ),
        ("decision = 'block'", "hook_executions_rare_decision_idx"),
        ("decision = 'timeout'", "hook_executions_rare_decision_idx"),
        (
            "created_at >= '2030-01-01T00:00:00Z'",
            "hook_executions_created_at_brin",
        ),
        ("id < 1000", "hook_executions_pkey"),
    ] {
        let sql = format!(
            "EXPLAIN SELECT * FROM hook_executions WHERE {filter} ORDER BY id DESC LIMIT 51"
        );
        let plan: Vec<String> = sqlx::query_scalar(&sql).fetch_all(&pool).await.unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains(index), "{filter}: expected {index}:\n{plan}");
        assert!(!plan.contains("Seq Scan"), "{filter}:\n{plan}");
    }
    // And through the store: the same answers as before the migration would give.
    let hook_rows = store
        .list(&query(|q| {
            q.hook = hook("ns-1/h-2");
            q.limit = 3;
        }))
        .await
        .unwrap();
    assert_eq!(events(&hook_rows.rows), ["e-19997", "e-19977", "e-19957"]);
    let timeouts = store
        .list(&query(|q| q.decision = Some(Outcome::Timeout)))
        .await
        .unwrap();
    assert!(timeouts.rows.is_empty());
    store.close().await;
    pool.close().await;
}

#[tokio::test]
async fn sqlite_creates_the_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let store = AuditStore::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    assert!(path.is_file(), "file created");
    assert_eq!(store.backend(), "sqlite");
    let AuditStore::Sqlite(pool) = &store else {
        panic!("sqlite URL gave {}", store.backend())
    };
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    // Rows name tenants and sessions: the file and its WAL are the owner's only.
    assert_eq!(store.insert_batch(&rows("p", 1)).await.unwrap(), 1);
    use std::os::unix::fs::PermissionsExt;
    for f in ["fresh.db", "fresh.db-wal"] {
        let m = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(m & 0o777, 0o600, "{f}: {m:o}");
    }
    store.close().await;
    // A file others could read (an older version's, or made by hand) is narrowed.
    for f in ["fresh.db", "fresh.db-wal"] {
        let p = dir.path().join(f);
        if p.exists() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let store = AuditStore::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    for f in ["fresh.db", "fresh.db-wal"] {
        let p = dir.path().join(f);
        if p.exists() {
            let m = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(m & 0o777, 0o600, "{f} narrowed: {m:o}");
        }
    }
    store.close().await;

    let missing_dir = dir.path().join("no/such/dir/a.db");
    let e = AuditStore::connect(&format!("sqlite://{}", missing_dir.display()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Connect {
                backend: "sqlite",
                ..
            }
        ),
        "{e}"
    );

    let mem = AuditStore::connect("sqlite::memory:").await.unwrap();
    assert_eq!(mem.insert_batch(&rows("m", 2)).await.unwrap(), 2);
    assert_eq!(mem.count().await.unwrap(), 2);
}

#[tokio::test]
async fn an_unreachable_postgres_is_a_retryable_connect_error_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://audit:s3cret@127.0.0.1:{port}/agenthooks");
    let e = AuditStore::connect(&url).await.unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Connect {
                backend: "postgres",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_retryable());
    let msg = e.to_string();
    assert!(!msg.contains("s3cret"), "{msg}");
    assert!(msg.contains("audit:***@127.0.0.1"), "{msg}");
}

/// The harness contract the durability tests rely on: SIGKILL mid-use, restart on the same
/// dir and port, the pool reconnects and committed rows survive (crash recovery); a fast
/// stop and start again too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_harness_kill_and_restart_keep_committed_rows() {
    let (pg, t) = tokio::task::spawn_blocking(PgServer::new_timed)
        .await
        .unwrap()
        .unwrap();
    eprintln!("private PostgreSQL start: {t:?}");
    let store = AuditStore::connect(&pg.url()).await.unwrap();
    assert_eq!(store.insert_batch(&rows("before", 100)).await.unwrap(), 100);

    pg.kill();
    assert!(!pg.is_running());
    let e = store.insert_batch(&rows("down", 1)).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");

    let restarted = std::time::Instant::now();
    tokio::task::block_in_place(|| pg.start()).unwrap();
    eprintln!("restart after SIGKILL: {:?}", restarted.elapsed());
    assert!(pg.is_running());
    // The pool drops its dead connections and opens new ones.
    let mut inserted = None;
    for _ in 0..50 {
        match store.insert_batch(&rows("after", 10)).await {
            Ok(n) => {
                inserted = Some(n);
                break;
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(inserted, Some(10));
    assert_eq!(
        store.count().await.unwrap(),
        110,
        "committed rows survive the crash"
    );

    tokio::task::block_in_place(|| pg.stop()).unwrap();
    assert!(!pg.is_running());
    tokio::task::block_in_place(|| pg.start()).unwrap();
    let fresh = AuditStore::connect(&pg.url()).await.unwrap();
    assert_eq!(fresh.count().await.unwrap(), 110);
    fresh.close().await;
    store.close().await;
    let dir = pg.data_dir();
    drop(pg);
    assert!(!dir.exists(), "drop stops the server and removes its dir");
}
