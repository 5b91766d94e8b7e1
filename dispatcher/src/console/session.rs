//! Console sessions: who signed in, kept on the server; the browser holds only a random
//! id in a cookie.
//!
//! - The cookie [`COOKIE`] holds 32 random bytes (hex). It is `HttpOnly`,
//!   `SameSite=Strict`, `Path=/ui`, and `Secure` when the port serves TLS. The store keys
//!   sessions by the id's SHA-256, so the ids themselves are not kept.
//! - A session ends [`IDLE`] after its last request, [`MAX_AGE`] after sign-in, when the
//!   token it signed in with expires (its JWT `exp`, when it has one), on sign-out, or
//!   when the store is full ([`MAX_SESSIONS`], least recently used first).
//! - Every form carries the session's CSRF token ([`Session::csrf`]); a POST without it
//!   is refused ([`Session::csrf_matches`], constant time).
//!
//! Pure apart from the random ids: times come in as arguments.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashlink::LruCache;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::server::Principal;

/// The session cookie's name.
pub const COOKIE: &str = "agenthooks_console";
/// Sessions kept at most; past it the least recently used one ends.
pub const MAX_SESSIONS: usize = 10_000;
/// A session ends this long after its last request.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after sign-in, whatever else.
pub const MAX_AGE: Duration = Duration::from_secs(12 * 60 * 60);

/// A signed-in person.
pub struct Session {
    /// Whom the API routes authorize ([`Principal`]).
    pub principal: Principal,
    /// The name shown in the header (`admin`, or the Kubernetes user name).
    pub name: String,
    /// The token every form carries back (64 hex characters).
    pub csrf: String,
    /// In a cluster: the bearer token the person signed in with, sent to the API server
    /// on their behalf. Never logged, never shown.
    pub token: Option<String>,
    /// When the session ends at the latest: sign-in + [`MAX_AGE`], or the token's expiry
    /// if sooner.
    ends_at: Instant,
    last_seen: Mutex<Instant>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Whether `presented` is this session's CSRF token, in constant time.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        presented.len() == self.csrf.len()
            && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// What a cookie value found.
#[derive(Debug)]
pub enum Lookup {
    /// A live session (its idle clock restarted).
    Live(Arc<Session>),
    /// A session that existed and ended (idle, too old, its token expired).
    Ended,
    /// No session with that id (never was, signed out, or pushed out of a full store).
    Unknown,
}

/// The sessions of one console.
pub struct Sessions {
    map: Mutex<LruCache<[u8; 32], Arc<Session>>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            map: Mutex::new(LruCache::new(MAX_SESSIONS)),
        }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], Arc<Session>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a session at `now`; `token_ttl` is what is left of the token's validity,
    /// if known. Returns the cookie value (the session id) and the session.
    ///
    /// Errors: the system's random source failed (no session is made).
    pub fn create(
        &self,
        principal: Principal,
        name: String,
        token: Option<String>,
        token_ttl: Option<Duration>,
        now: Instant,
    ) -> Result<(String, Arc<Session>), getrandom::Error> {
        let id = random_hex()?;
        let csrf = random_hex()?;
        let ends_at = now + token_ttl.map_or(MAX_AGE, |t| t.min(MAX_AGE));
        let session = Arc::new(Session {
            principal,
            name,
            csrf,
            token,
            ends_at,
            last_seen: Mutex::new(now),
        });
        self.lock().insert(key(&id), Arc::clone(&session));
        Ok((id, session))
    }

    /// The session of cookie value `id` at `now`. An ended session is removed.
    pub fn get(&self, id: &str, now: Instant) -> Lookup {
        let k = key(id);
        let mut map = self.lock();
        let Some(s) = map.get(&k) else {
            return Lookup::Unknown;
        };
        let mut last = s.last_seen.lock().unwrap_or_else(|p| p.into_inner());
        if now >= s.ends_at || now.saturating_duration_since(*last) >= IDLE {
            drop(last);
            map.remove(&k);
            return Lookup::Ended;
        }
        *last = now;
        drop(last);
        Lookup::Live(Arc::clone(s))
    }

    /// Ends the session of cookie value `id` (sign-out, or its token was refused).
    pub fn remove(&self, id: &str) {
        self.lock().remove(&key(id));
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No session held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// 32 random bytes as 64 lowercase hex characters.
fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

/// The session id in a request's `Cookie` headers, if any (the first [`COOKIE`]).
pub fn cookie_value(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that starts a session with `id`.
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={}{}",
        MAX_AGE.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(s: &Sessions, ttl: Option<Duration>, now: Instant) -> (String, Arc<Session>) {
        s.create(Principal::Admin, "admin".into(), None, ttl, now)
            .unwrap()
    }

    #[test]
    fn a_session_lives_while_used_and_ends_idle_old_or_with_its_token() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (id, session) = start(&s, None, t0);
        assert_eq!(id.len(), 64);
        assert_eq!(session.csrf.len(), 64);
        assert_ne!(id, session.csrf);
        // Used every 59 minutes: alive until MAX_AGE.
        let mut t = t0;
        for _ in 0..12 {
            t += Duration::from_secs(59 * 60);
            if t >= t0 + MAX_AGE {
                break;
            }
            assert!(matches!(s.get(&id, t), Lookup::Live(_)), "at {:?}", t - t0);
        }
        assert!(matches!(s.get(&id, t0 + MAX_AGE), Lookup::Ended));
        assert!(
            matches!(s.get(&id, t0 + MAX_AGE), Lookup::Unknown),
            "removed"
        );

        let (idle, _) = start(&s, None, t0);
        assert!(matches!(s.get(&idle, t0 + IDLE), Lookup::Ended));

        let (short, _) = start(&s, Some(Duration::from_secs(600)), t0);
        assert!(matches!(
            s.get(&short, t0 + Duration::from_secs(599)),
            Lookup::Live(_)
        ));
        assert!(matches!(
            s.get(&short, t0 + Duration::from_secs(600)),
            Lookup::Ended
        ));
    }

    #[test]
    fn sign_out_ends_it_and_unknown_ids_find_nothing() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (id, _) = start(&s, None, t0);
        assert!(matches!(s.get(&"0".repeat(64), t0), Lookup::Unknown));
        s.remove(&id);
        assert!(matches!(s.get(&id, t0), Lookup::Unknown));
        assert!(s.is_empty());
    }

    #[test]
    fn the_store_is_bounded() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (first, _) = start(&s, None, t0);
        for _ in 0..MAX_SESSIONS {
            start(&s, None, t0);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(
            matches!(s.get(&first, t0), Lookup::Unknown),
            "oldest pushed out"
        );
    }

    #[test]
    fn csrf_tokens_compare_whole() {
        let s = Sessions::default();
        let (_, session) = start(&s, None, Instant::now());
        let good = session.csrf.clone();
        assert!(session.csrf_matches(&good));
        assert!(!session.csrf_matches(&good[..63]));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches(&"0".repeat(64)));
    }

    #[test]
    fn cookies_are_read_strictly_and_set_with_their_attributes() {
        let mut h = axum::http::HeaderMap::new();
        let id = "ab".repeat(32);
        h.append(
            axum::http::header::COOKIE,
            format!("other=1; {COOKIE}={id}").parse().unwrap(),
        );
        assert_eq!(cookie_value(&h), Some(id.clone()));
        let mut bad = axum::http::HeaderMap::new();
        bad.append(
            axum::http::header::COOKIE,
            format!("{COOKIE}=../../etc").parse().unwrap(),
        );
        assert_eq!(cookie_value(&bad), None);
        assert_eq!(
            set_cookie(&id, false),
            format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=43200")
        );
        assert!(set_cookie(&id, true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
