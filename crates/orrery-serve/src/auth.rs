//! Bearer tokens. Two live in files: `user.token`, the cluster
//! administrators' (submit, cancel and read everything; manage tenants),
//! and `agent.token`, the node agents' (the node endpoints). Both are made
//! on first start (32 random bytes from the OS, hex) in files of mode 0600
//! and compared in constant time. Tenants' tokens are issued through the
//! API and live in the log as hashes ([`crate::tenants`]).

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Who a token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Submit, cancel, read.
    User,
    /// Node endpoints.
    Agent,
}

/// Who is asking, once their token is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The administrators (`user.token`).
    Admin,
    /// A tenant's member: the tenant and the token's public id.
    Tenant {
        /// Tenant.
        tenant: String,
        /// The token's id (`tok-...`).
        token: String,
    },
    /// A part of orrery acting for the administrators (the Kubernetes
    /// extender and controller), named in the log.
    Component(&'static str),
}

impl Caller {
    /// The tenant whose jobs it may see, None for the administrators (all).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Caller::Admin | Caller::Component(_) => None,
            Caller::Tenant { tenant, .. } => Some(tenant),
        }
    }

    /// Whether it may see (read, cancel) a job of `tenant`.
    pub fn sees(&self, tenant: Option<&str>) -> bool {
        self.tenant().is_none_or(|mine| tenant == Some(mine))
    }

    /// How the log names it (a [`crate::api::LogEntry`]'s `source`).
    pub fn source(&self) -> String {
        match self {
            Caller::Admin => "admin".into(),
            Caller::Tenant { tenant, token } => format!("{tenant}/{token}"),
            Caller::Component(name) => (*name).into(),
        }
    }
}

/// The two tokens.
#[derive(Clone)]
pub struct Tokens {
    user: String,
    agent: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens { .. }")
    }
}

/// Path of a scope's token file in `dir`.
pub fn token_path(dir: &Path, scope: Scope) -> PathBuf {
    dir.join(match scope {
        Scope::User => "user.token",
        Scope::Agent => "agent.token",
    })
}

impl Tokens {
    /// Reads the tokens in `dir`, making any that is missing.
    pub fn load_or_create(dir: &Path) -> Result<Tokens> {
        Ok(Tokens {
            user: load_or_create(&token_path(dir, Scope::User))?,
            agent: load_or_create(&token_path(dir, Scope::Agent))?,
        })
    }

    /// Tokens given directly (tests).
    pub fn new(user: &str, agent: &str) -> Tokens {
        Tokens { user: user.into(), agent: agent.into() }
    }

    /// The scope of a presented token, if it is one of ours. Constant time in
    /// the token's content.
    pub fn scope_of(&self, presented: &str) -> Option<Scope> {
        let p = presented.as_bytes();
        let user: bool = p.ct_eq(self.user.as_bytes()).into();
        let agent: bool = p.ct_eq(self.agent.as_bytes()).into();
        if user {
            Some(Scope::User)
        } else if agent {
            Some(Scope::Agent)
        } else {
            None
        }
    }
}

impl Tokens {
    /// The tokens every replica of a highly available service shares: the
    /// first replica to start puts its own (from `dir`, made if missing)
    /// under `PREFIX/tokens/` in etcd, if none are there yet (a guarded
    /// transaction, so two first starts agree); every replica then uses
    /// etcd's and writes them to its `dir` for the CLI on its machine. etcd
    /// is the trusted store here, as it is for Kubernetes Secrets.
    pub async fn shared(etcd: &crate::etcd::Etcd, prefix: &str, dir: &Path) -> Result<Tokens> {
        use crate::etcd::{Compare, Op};
        let local = Tokens::load_or_create(dir)?;
        let mut agreed = Vec::new();
        for (scope, mine) in [(Scope::User, &local.user), (Scope::Agent, &local.agent)] {
            let name = if scope == Scope::User { "user" } else { "agent" };
            let key = format!("{prefix}tokens/{name}").into_bytes();
            let r = etcd
                .txn(
                    &[Compare::CreateRevision(key.clone(), 0)],
                    &[Op::Put { key: key.clone(), value: mine.clone().into_bytes(), lease: 0 }],
                    &[Op::Get(key)],
                )
                .await
                .context("agreeing on the tokens in etcd")?;
            let token = match r.read.first() {
                Some(kv) if !r.succeeded => String::from_utf8_lossy(&kv.value).trim().to_string(),
                _ => mine.clone(),
            };
            if token.len() < 16 {
                bail!("etcd {prefix}tokens/{name}: token must be at least 16 characters");
            }
            if token != *mine {
                write_token(&token_path(dir, scope), &token)?;
            }
            agreed.push(token);
        }
        let agent = agreed.pop().unwrap_or_default();
        let user = agreed.pop().unwrap_or_default();
        Ok(Tokens { user, agent })
    }
}

/// Writes a secret to a new file of mode 0600 (a tenant's token for
/// `--token`), replacing any there.
pub fn write_secret(path: &Path, token: &str) -> Result<()> {
    write_token(path, token)
}

/// Replaces a token file (mode 0600, written then renamed).
fn write_token(path: &Path, token: &str) -> Result<()> {
    orrery_model::files::write_private(path, format!("{token}\n"))
        .with_context(|| format!("writing {}", path.display()))
}

fn load_or_create(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                bail!("{}: token file is readable by others (mode {:o}); chmod 600 it", path.display(), mode & 0o777);
            }
            let t = s.trim().to_string();
            if t.len() < 16 {
                bail!("{}: token must be at least 16 characters", path.display());
            }
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut bytes)
                .map_err(|e| anyhow::anyhow!("reading random bytes from the OS: {e}"))?;
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            writeln!(f, "{token}")?;
            f.sync_all()?;
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Reads a token file (clients and agents).
pub fn read_token(path: &Path) -> Result<String> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading token file {}", path.display()))?;
    Ok(s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_made_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Tokens::load_or_create(dir.path()).expect("create");
        let mode = std::fs::metadata(token_path(dir.path(), Scope::User)).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Tokens::load_or_create(dir.path()).expect("read");
        assert_eq!(t.user, again.user);
        assert_ne!(t.user, t.agent);
        assert_eq!(t.scope_of(&t.user), Some(Scope::User));
        assert_eq!(t.scope_of(&t.agent), Some(Scope::Agent));
        assert_eq!(t.scope_of("nope"), None);
        assert_eq!(t.scope_of(&t.user[..10]), None);
    }
}
