//! `orrery tenant` (teams, their quotas and tokens) and `orrery certs`
//! (TLS for a test cluster): clients of the live service (issue 70).

use crate::live::{ClientArgs, client, runtime};
use anyhow::Result;
use std::path::PathBuf;

/// `orrery tenant` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TenantCommand {
    /// Make a tenant, or change its quota, borrowing limit or weight.
    Add {
        /// Name: lower-case letters, digits and '-' (a DNS label).
        name: String,
        /// GPUs guaranteed to it.
        #[arg(long)]
        gpus: u32,
        /// GPUs of idle quota it may borrow beyond --gpus.
        #[arg(long)]
        borrow_limit: Option<u32>,
        /// Weight in fair sharing.
        #[arg(long, default_value_t = 1.0, value_parser = crate::numbers::positive)]
        weight: f64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Tenants with their quotas and the GPUs they hold.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Issue a token to a tenant and write it to a file (mode 0600): the
    /// service keeps only its hash.
    Token {
        /// Tenant.
        name: String,
        /// Write the token here (it is shown nowhere else).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Refuse it after this long (`90s`, `12h`, `30d`).
        #[arg(long, value_parser = crate::numbers::duration_s)]
        expires_in: Option<f64>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// A tenant's tokens: ids, expiry, revoked (never a secret).
    Tokens {
        /// Tenant.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Revoke a token by its id (`tok-...`).
    Revoke {
        /// Token id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `orrery tenant ...`.
pub fn run(cmd: &TenantCommand) -> Result<()> {
    let rt = runtime()?;
    let err = |e: orrery_serve::client::ClientError| anyhow::anyhow!("{e}");
    match cmd {
        TenantCommand::Add { name, gpus, borrow_limit, weight, client: args } => {
            let t = orrery_serve::tenants::Tenant {
                name: name.clone(),
                gpus: *gpus,
                borrow_limit: *borrow_limit,
                weight: *weight,
            };
            let t = rt.block_on(client(args)?.set_tenant(&t)).map_err(err)?;
            println!(
                "tenant {}: {} GPUs, borrow limit {}, weight {}",
                t.name,
                t.gpus,
                t.borrow_limit.unwrap_or(0),
                t.weight
            );
        }
        TenantCommand::List { client: args } => {
            let list = rt.block_on(client(args)?.tenants()).map_err(err)?;
            println!(
                "{:<20} {:>8} {:>8} {:>7} {:>8} {:>8} {:>7}",
                "tenant", "quota", "borrow", "weight", "in use", "active", "queued"
            );
            for t in list {
                println!(
                    "{:<20} {:>8} {:>8} {:>7} {:>8} {:>8} {:>7}",
                    t.tenant.name,
                    t.tenant.gpus,
                    t.tenant.borrow_limit.unwrap_or(0),
                    t.tenant.weight,
                    t.gpus_in_use,
                    t.jobs_active,
                    t.jobs_queued
                );
            }
        }
        TenantCommand::Token { name, out, expires_in, client: args } => {
            let issued = rt.block_on(client(args)?.issue_token(name, *expires_in)).map_err(err)?;
            orrery_serve::auth::write_secret(out, &issued.token)?;
            let until = issued
                .info
                .expires_unix_ms
                .map_or("never expires".to_string(), |ms| format!("expires at Unix ms {ms}"));
            println!("token {} for tenant {} in {} ({until})", issued.info.id, name, out.display());
        }
        TenantCommand::Tokens { name, client: args } => {
            for t in rt.block_on(client(args)?.tokens(name)).map_err(err)? {
                let state = if t.revoked { "revoked" } else { "valid" };
                let until = t.expires_unix_ms.map_or("-".to_string(), |ms| ms.to_string());
                println!("{:<18} {:<8} expires_unix_ms {until}", t.id, state);
            }
        }
        TenantCommand::Revoke { id, client: args } => {
            let t = rt.block_on(client(args)?.revoke_token(id)).map_err(err)?;
            println!("token {} of tenant {} revoked", t.id, t.tenant);
        }
    }
    Ok(())
}

/// `orrery certs`.
pub fn certs(out: &std::path::Path, names: &[String]) -> Result<()> {
    let c = orrery_serve::tls::make_test_certs(out, names)?;
    println!(
        "wrote {} (the CA: --ca), {} and {} (--tls-cert, --tls-key)",
        c.ca.display(),
        c.cert.display(),
        c.key.display()
    );
    Ok(())
}
