//! `caduceus tokens create | list | revoke`: scoped tokens on a running
//! coordinator (admin only; see the coordinator README, "Tokens and roles").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use caduceus_proto::{CreateTokenRequest, ListTokensRequest, RevokeTokenRequest, TokenInfo};

use crate::approvals::{RemoteArgs, remote_client};
use crate::config::Config;
use crate::out;
use crate::target::Client;

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Create a token and print it (once) on stdout.
    Create {
        /// worker: may only attach a worker; client: tools, sessions,
        /// status; admin: also approvals and tokens.
        #[arg(long, value_parser = ["worker", "client", "admin"])]
        role: String,
        /// A name to recognise (and revoke) the token by; default: its id.
        #[arg(long)]
        name: Option<String>,
        /// Lifetime: a number with s, m, h or d (`90m`, `24h`, `7d`); default: until revoked.
        #[arg(long)]
        expires: Option<String>,
        /// Print the token and its secret as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List the tokens (never their secrets).
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Revoke a token by id, or every live token of a name: it is refused on
    /// its next request, and workers attached with it are disconnected.
    Revoke {
        /// The token id (`tok_…`) or name.
        #[arg(value_name = "ID_OR_NAME")]
        which: String,
        /// Print `{"revoked": [...], "workers_disconnected": N}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

async fn client(remote: &RemoteArgs, config: &Config) -> Result<Client> {
    remote_client(
        remote,
        config,
        "tokens are kept by a running coordinator: pass --coordinator or set CADUCEUS_COORDINATOR",
    )
    .await
}

#[allow(clippy::print_stderr)] // what was created, for the operator; stdout has the token only
pub async fn run(command: TokensCommand, config: &Config) -> Result<()> {
    match command {
        TokensCommand::Create {
            role,
            name,
            expires,
            json,
            remote,
        } => {
            let expires_in = expires.as_deref().map(parse_lifetime).transpose()?;
            let created = client(&remote, config)
                .await?
                .create_token(CreateTokenRequest {
                    role,
                    name: name.unwrap_or_default(),
                    expires_in_secs: expires_in.map_or(0, |d| d.as_secs()),
                })
                .await
                .map_err(|s| anyhow!("{}", s.message()))?
                .into_inner();
            if json {
                let mut shown = created.token.as_ref().map(token_json).unwrap_or_default();
                shown["secret"] = Value::String(created.secret);
                return out(&serde_json::to_string_pretty(&shown)?);
            }
            if let Some(info) = &created.token {
                eprintln!(
                    "created {} token '{}' ({}), {}; it is shown only now",
                    info.role,
                    info.name,
                    info.id,
                    match info.expires_at {
                        0 => "valid until revoked".to_owned(),
                        at => format!("expires in {}", lifetime_text(at.saturating_sub(now()))),
                    }
                );
            }
            out(&created.secret)
        }
        TokensCommand::List { json, remote } => {
            let tokens = client(&remote, config)
                .await?
                .list_tokens(ListTokensRequest {})
                .await
                .map_err(|s| anyhow!("{}", s.message()))?
                .into_inner()
                .tokens;
            if json {
                let list: Vec<Value> = tokens.iter().map(token_json).collect();
                return out(&serde_json::to_string_pretty(&list)?);
            }
            if tokens.is_empty() {
                return out("no tokens (the shared --token is not listed)");
            }
            out(&format!(
                "{:<17} {:<7} {:<10} {:<20} NAME",
                "ID", "ROLE", "STATE", "EXPIRES"
            ))?;
            let now = now();
            for t in &tokens {
                out(&format!(
                    "{:<17} {:<7} {:<10} {:<20} {}",
                    t.id,
                    t.role,
                    state(t, now),
                    match t.expires_at {
                        0 => "never".to_owned(),
                        at if at <= now => "-".to_owned(),
                        at => format!("in {}", lifetime_text(at - now)),
                    },
                    t.name
                ))?;
            }
            Ok(())
        }
        TokensCommand::Revoke {
            which,
            json,
            remote,
        } => {
            let response = client(&remote, config)
                .await?
                .revoke_token(RevokeTokenRequest { token: which })
                .await
                .map_err(|s| anyhow!("{}", s.message()))?
                .into_inner();
            if json {
                return out(&serde_json::to_string_pretty(&json!({
                    "revoked": response.revoked.iter().map(token_json).collect::<Vec<_>>(),
                    "workers_disconnected": response.workers_disconnected,
                }))?);
            }
            for t in &response.revoked {
                out(&format!("revoked {} token '{}' ({})", t.role, t.name, t.id))?;
            }
            if response.workers_disconnected > 0 {
                out(&format!(
                    "disconnected {} worker(s) attached with it",
                    response.workers_disconnected
                ))?;
            }
            Ok(())
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn state(t: &TokenInfo, now: u64) -> &'static str {
    if t.revoked_at != 0 {
        "revoked"
    } else if t.expires_at != 0 && t.expires_at <= now {
        "expired"
    } else {
        "live"
    }
}

fn token_json(t: &TokenInfo) -> Value {
    let at = |secs: u64| (secs != 0).then_some(secs);
    json!({
        "id": t.id,
        "name": t.name,
        "role": t.role,
        "state": state(t, now()),
        "created_at": t.created_at,
        "expires_at": at(t.expires_at),
        "revoked_at": at(t.revoked_at),
    })
}

/// `90s`, `30m`, `24h`, `7d` (a bare number is seconds).
pub(crate) fn parse_lifetime(text: &str) -> Result<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| anyhow!("invalid lifetime '{text}': use a number with s, m, h or d (24h)"))?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("invalid lifetime '{text}': the unit is s, m, h or d (24h)"),
    };
    if n == 0 {
        bail!("invalid lifetime '{text}': a token must live longer than 0 seconds");
    }
    Ok(Duration::from_secs(n.saturating_mul(unit_secs)))
}

fn lifetime_text(secs: u64) -> String {
    match secs {
        s if s >= 86_400 => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
        s if s >= 3600 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
