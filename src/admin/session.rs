//! Login sessions of the `/ui` page (docs/security.md, "The fleet page"): a browser that
//! posted the admin token to `POST /ui/login` gets a cookie holding a random session id,
//! never the token. The server keeps only the SHA-256 of each id with its expiry, at most
//! [`MAX_SESSIONS`] at once, each for `[ui] session_ttl` (default 12 h) from login
//! (absolute, not sliding).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cookie::{Cookie, SameSite};
use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// Sessions held at most; a login past it ends the one that expires soonest.
pub const MAX_SESSIONS: usize = 256;
/// The cookie's name over plain HTTP.
pub const COOKIE_NAME: &str = "loopwatch_session";
/// The cookie's name when the admin listener has TLS: the `__Host-` prefix makes browsers
/// refuse it unless it is `Secure`, `Path=/` and has no `Domain`.
pub const SECURE_COOKIE_NAME: &str = "__Host-loopwatch_session";

/// The live sessions: SHA-256 of the id → expiry.
pub struct Sessions {
    ttl: Duration,
    max: usize,
    live: Mutex<HashMap<[u8; 32], Instant>>,
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// A store whose sessions last `ttl`, at most `max` (at least 1) at once.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max: max.max(1),
            live: Mutex::new(HashMap::new()),
        }
    }

    /// Starts a session at `now`; returns its id: 64 lowercase hex characters, 256 bits
    /// from the thread's CSPRNG. Expired sessions are dropped first; when the store is
    /// still full, the one expiring soonest ends.
    pub fn create(&self, now: Instant) -> String {
        let id = hex::encode(rand::random::<[u8; 32]>());
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|_, expiry| *expiry > now);
        if live.len() >= self.max {
            if let Some(soonest) = live.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k) {
                live.remove(&soonest);
            }
        }
        live.insert(digest(&id), now + self.ttl);
        id
    }

    /// True when `id` names a session that has not expired at `now` (an expired one is
    /// dropped).
    pub fn is_valid(&self, id: &str, now: Instant) -> bool {
        let key = digest(id);
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.get(&key) {
            Some(expiry) if *expiry > now => true,
            Some(_) => {
                live.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Ends the session `id` (logout); unknown ids are ignored.
    pub fn remove(&self, id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.remove(&digest(id));
    }

    /// Sessions held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session lifetime.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// The session cookie's name and attributes: `HttpOnly`, `SameSite=Strict`, `Path=/`,
/// `Max-Age` the session lifetime, and `Secure` (with the `__Host-` name) when the admin
/// listener has TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionCookie {
    pub secure: bool,
}

impl SessionCookie {
    /// The cookie's name.
    pub fn name(&self) -> &'static str {
        if self.secure {
            SECURE_COOKIE_NAME
        } else {
            COOKIE_NAME
        }
    }

    fn build(&self, value: String, max_age: Duration) -> HeaderValue {
        let cookie = Cookie::build((self.name(), value))
            .http_only(true)
            .same_site(SameSite::Strict)
            .path("/")
            .secure(self.secure)
            .max_age(cookie::time::Duration::seconds(
                i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX),
            ))
            .build();
        // A hex id and fixed attributes: always a valid header value.
        HeaderValue::from_str(&cookie.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// `Set-Cookie` value that stores session `id` for `ttl`.
    pub fn set(&self, id: &str, ttl: Duration) -> HeaderValue {
        self.build(id.to_string(), ttl)
    }

    /// `Set-Cookie` value that deletes the cookie (empty, `Max-Age=0`).
    pub fn clear(&self) -> HeaderValue {
        self.build(String::new(), Duration::ZERO)
    }

    /// The session id the request's `Cookie` headers carry under this cookie's name, if
    /// any (the first; cookies that do not parse are skipped).
    pub fn read(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(Cookie::split_parse)
            .filter_map(Result::ok)
            .find(|c| c.name() == self.name())
            .map(|c| c.value().to_string())
            .filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_are_bounded() {
        let t0 = Instant::now();
        let sessions = Sessions::new(Duration::from_secs(60), 3);
        let a = sessions.create(t0);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(sessions.is_valid(&a, t0 + Duration::from_secs(59)));
        assert!(!sessions.is_valid(&a, t0 + Duration::from_secs(60)));
        assert_eq!(sessions.len(), 0, "an expired session is dropped when seen");
        let ids: Vec<String> = (0..3)
            .map(|i| sessions.create(t0 + Duration::from_secs(i)))
            .collect();
        assert_eq!(sessions.len(), 3);
        let newest = sessions.create(t0 + Duration::from_secs(10));
        assert_eq!(sessions.len(), 3, "bounded");
        assert!(
            !sessions.is_valid(&ids[0], t0 + Duration::from_secs(10)),
            "soonest to expire ended"
        );
        assert!(sessions.is_valid(&ids[1], t0 + Duration::from_secs(10)));
        assert!(sessions.is_valid(&newest, t0 + Duration::from_secs(10)));
        sessions.remove(&newest);
        assert!(!sessions.is_valid(&newest, t0 + Duration::from_secs(10)));
        assert!(!sessions.is_valid("not-a-session", t0));
        assert_ne!(sessions.create(t0), sessions.create(t0), "random ids");
    }

    #[test]
    fn cookie_attributes_and_reading() {
        let plain = SessionCookie { secure: false };
        let twelve_hours = Duration::from_secs(12 * 3600);
        let set = plain.set("abc123", twelve_hours);
        let set = set.to_str().unwrap();
        for part in [
            "loopwatch_session=abc123",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=43200",
        ] {
            assert!(set.contains(part), "{set}");
        }
        assert!(!set.contains("Secure"), "{set}");
        let secure = SessionCookie { secure: true }.set("abc123", twelve_hours);
        let secure = secure.to_str().unwrap();
        assert!(
            secure.starts_with("__Host-loopwatch_session=abc123"),
            "{secure}"
        );
        assert!(secure.contains("Secure"), "{secure}");
        let clear = plain.clear();
        let clear = clear.to_str().unwrap();
        assert!(
            clear.starts_with("loopwatch_session=;") && clear.contains("Max-Age=0"),
            "{clear}"
        );

        let mut headers = HeaderMap::new();
        headers.append(
            COOKIE,
            HeaderValue::from_static("other=1; loopwatch_session=feed"),
        );
        assert_eq!(plain.read(&headers).as_deref(), Some("feed"));
        assert_eq!(SessionCookie { secure: true }.read(&headers), None);
        headers.clear();
        headers.append(COOKIE, HeaderValue::from_static("garbage"));
        headers.append(COOKIE, HeaderValue::from_static("loopwatch_session="));
        assert_eq!(plain.read(&headers), None);
    }
}
