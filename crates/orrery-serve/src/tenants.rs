//! Tenants (teams) and their tokens (issue 70).
//!
//! A tenant is a team with a GPU quota (Kueue's ClusterQueue nominal quota),
//! how much idle quota it may borrow beyond it, and a weight. Its members
//! hold tokens the administrators issue: each is shown once, stored only as
//! its SHA-256 (a token is 32 random bytes, so a fast hash is as good as a
//! slow one: there is nothing to guess), and can expire and be revoked.
//!
//! Tenants and tokens are not a table of their own: they are [`AdminEvent`]s
//! in the decision log, so both stores keep them, a standby replays them
//! with everything else, and the log is the audit trail of who changed
//! what. [`Tenants`] is their fold.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

/// Longest tenant name.
pub const MAX_NAME: usize = 63;

/// A tenant as `GET /v1/tenants` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Name: lower-case letters, digits and `-`, starting with a letter (a
    /// DNS label, as Kubernetes namespaces are).
    pub name: String,
    /// GPUs guaranteed to it (nominal quota).
    #[schemars(range(min = 0, max = 10_000_000))]
    pub gpus: u32,
    /// GPUs of other tenants' idle quota it may borrow beyond `gpus`
    /// (none when left out; Kueue's borrowingLimit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10_000_000))]
    pub borrow_limit: Option<u32>,
    /// Its weight in fair sharing (1 when left out).
    #[serde(default = "one")]
    #[schemars(range(min = 0.001, max = 1000))]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// What the administrators change: tenants and their tokens (issue 70),
/// logged so both stores keep them and a standby replays them
/// (this module).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AdminEvent {
    /// A tenant made or changed.
    TenantSet(Tenant),
    /// A token issued to a tenant (its hash only).
    TokenIssued {
        /// Public id.
        token: String,
        /// Tenant.
        tenant: String,
        /// Hex SHA-256 of the secret.
        sha256: String,
        /// Unix ms after which it is refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_unix_ms: Option<i64>,
    },
    /// A token revoked.
    TokenRevoked {
        /// Public id.
        token: String,
    },
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Public id (`tok-` and 12 hex digits of its hash): what logs and
    /// revocation name.
    pub id: String,
    /// The tenant it speaks for.
    pub tenant: String,
    /// Unix ms after which it is refused, if it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_unix_ms: Option<i64>,
    /// Revoked: refused from the commit of the revocation on.
    pub revoked: bool,
}

/// Whether `name` can name a tenant; the reason when not.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a name of 1 to {MAX_NAME} lower-case letters, digits and '-', starting with a letter and not ending \
             with '-'"
        ))
    }
}

/// Hex SHA-256 of a presented token.
pub fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The public id of a token with hash `sha256`.
pub fn token_id(sha256: &str) -> String {
    format!("tok-{}", &sha256[..12.min(sha256.len())])
}

/// A new secret: 32 bytes from the OS, hex, prefixed `orrt_` so a leaked
/// one is recognisable in a scanner.
pub fn new_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut bytes)
        .map_err(|e| anyhow::anyhow!("reading random bytes from the OS: {e}"))?;
    Ok(format!("orrt_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// The tenants and tokens in force: the fold of the log's admin events.
#[derive(Debug, Clone, Default)]
pub struct Tenants {
    tenants: BTreeMap<String, Tenant>,
    /// Tokens by id.
    tokens: BTreeMap<String, TokenInfo>,
    /// Token id by hash.
    by_hash: HashMap<String, String>,
}

impl Tenants {
    /// Applies one admin event; false (and nothing changed) when it is not
    /// valid here: a token for an unknown tenant, a hash or id issued
    /// before, a revocation of an unknown token.
    pub fn apply(&mut self, e: &AdminEvent) -> bool {
        match e {
            AdminEvent::TenantSet(t) => {
                if check_name(&t.name).is_err() {
                    return false;
                }
                self.tenants.insert(t.name.clone(), t.clone());
                true
            }
            AdminEvent::TokenIssued { token, tenant, sha256, expires_unix_ms } => {
                if !self.tenants.contains_key(tenant)
                    || self.by_hash.contains_key(sha256)
                    || self.tokens.contains_key(token)
                {
                    return false;
                }
                self.by_hash.insert(sha256.clone(), token.clone());
                let info = TokenInfo {
                    id: token.clone(),
                    tenant: tenant.clone(),
                    expires_unix_ms: *expires_unix_ms,
                    revoked: false,
                };
                self.tokens.insert(token.clone(), info);
                true
            }
            AdminEvent::TokenRevoked { token } => match self.tokens.get_mut(token) {
                Some(t) if !t.revoked => {
                    t.revoked = true;
                    true
                }
                _ => false,
            },
        }
    }

    /// The token presented, if it is a tenant's, unrevoked and unexpired at
    /// `now_unix_ms`. O(1): a hash lookup (the hash of the presented value
    /// is compared, never the secret, so timing says nothing about it).
    pub fn identify(&self, presented: &str, now_unix_ms: i64) -> Option<&TokenInfo> {
        let id = self.by_hash.get(&hash(presented))?;
        let t = self.tokens.get(id)?;
        (!t.revoked && t.expires_unix_ms.is_none_or(|e| now_unix_ms < e)).then_some(t)
    }

    /// Every tenant's quota, for admission ([`orrery_policy::quota`]).
    pub fn quotas(&self) -> BTreeMap<String, orrery_policy::quota::Quota> {
        self.tenants
            .values()
            .map(|t| {
                let q = orrery_policy::quota::Quota {
                    gpus: u64::from(t.gpus),
                    borrow_limit: u64::from(t.borrow_limit.unwrap_or(0)),
                    weight: t.weight,
                };
                (t.name.clone(), q)
            })
            .collect()
    }

    /// A tenant by name.
    pub fn get(&self, name: &str) -> Option<&Tenant> {
        self.tenants.get(name)
    }

    /// Every tenant, by name.
    pub fn list(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.values()
    }

    /// A token by id.
    pub fn token(&self, id: &str) -> Option<&TokenInfo> {
        self.tokens.get(id)
    }

    /// The tokens of `tenant`, by id.
    pub fn tokens_of<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a TokenInfo> + 'a {
        self.tokens.values().filter(move |t| t.tenant == tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(name: &str, gpus: u32) -> AdminEvent {
        AdminEvent::TenantSet(Tenant { name: name.into(), gpus, borrow_limit: None, weight: 1.0 })
    }

    fn issue(tenant: &str, secret: &str, expires: Option<i64>) -> AdminEvent {
        let sha256 = hash(secret);
        AdminEvent::TokenIssued { token: token_id(&sha256), tenant: tenant.into(), sha256, expires_unix_ms: expires }
    }

    #[test]
    fn names_are_dns_labels() {
        for ok in ["a", "team-a", "ml7"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "7up", "team_a", "a/b", "a-", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_token_speaks_for_its_tenant_until_it_expires_or_is_revoked() {
        let mut t = Tenants::default();
        assert!(!t.apply(&issue("a", "s1", None)), "no token for a tenant that does not exist");
        assert!(t.apply(&team("a", 8)));
        assert!(t.apply(&issue("a", "s1", None)));
        assert!(!t.apply(&issue("a", "s1", None)), "the same secret twice");
        assert!(t.apply(&issue("a", "s2", Some(1_000))));
        assert_eq!(t.identify("s1", 5_000).map(|i| i.tenant.as_str()), Some("a"));
        assert!(t.identify("s2", 999).is_some());
        assert!(t.identify("s2", 1_000).is_none(), "expired at its time");
        assert!(t.identify("s3", 0).is_none());
        let id = token_id(&hash("s1"));
        assert!(t.apply(&AdminEvent::TokenRevoked { token: id.clone() }));
        assert!(t.identify("s1", 5_000).is_none(), "revoked");
        assert!(!t.apply(&AdminEvent::TokenRevoked { token: id }), "revoked twice");
        assert_eq!(t.tokens_of("a").count(), 2);
        // The stored hash is not the secret.
        assert!(t.tokens.values().all(|i| !i.id.contains("s1")));
    }

    #[test]
    fn secrets_are_distinct_and_long() {
        let (a, b) = (new_secret().expect("os"), new_secret().expect("os"));
        assert_ne!(a, b);
        assert_eq!(a.len(), 5 + 64);
    }
}
