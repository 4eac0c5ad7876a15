//! `streamforge users create|delete|list`: SCRAM users through AlterUserScramCredentials and
//! DescribeUserScramCredentials (what `kafka-configs.sh --entity-type users` sends). The
//! password is salted and hashed here (PBKDF2); only the salted password crosses the network,
//! and the broker keeps only StoredKey and ServerKey.

use anyhow::Context;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;
use streamforge_broker::security::Mechanism;
use streamforge_broker::security::scram::{self, ITERATIONS_DEFAULT, SALT_BYTES};
use streamforge_client::Admin;

use crate::client_common::{ConnArgs, block_on, print_json, print_table};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: UsersCommand,
}

#[derive(clap::Subcommand)]
enum UsersCommand {
    /// Create a user, or set a new password (SCRAM-SHA-256 and SCRAM-SHA-512 by default).
    Create {
        /// The user name (the SASL username clients log in with).
        name: String,
        /// The password (also STREAMFORGE_USER_PASSWORD).
        #[arg(long, env = "STREAMFORGE_USER_PASSWORD", hide_env_values = true)]
        password: String,
        /// Comma-separated SCRAM mechanisms.
        #[arg(long, default_value = "SCRAM-SHA-256,SCRAM-SHA-512")]
        mechanisms: String,
        /// PBKDF2 iterations (4096 to 16384).
        #[arg(long, default_value_t = ITERATIONS_DEFAULT)]
        iterations: u32,
        /// Offline: write the credential into this stopped broker's data dir instead of
        /// sending it (as Kafka's `kafka-storage format --add-scram`): the user a broker
        /// logs in to the others with, before any SASL listener is up.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
    /// Delete a user's credentials (every SCRAM mechanism unless --mechanisms).
    Delete {
        /// The user name.
        name: String,
        /// Comma-separated SCRAM mechanisms to delete.
        #[arg(long, default_value = "SCRAM-SHA-256,SCRAM-SHA-512")]
        mechanisms: String,
    },
    /// List users with their mechanisms and iterations.
    List,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn scram_mechanisms(text: &str) -> anyhow::Result<Vec<Mechanism>> {
    text.split(',')
        .map(|m| m.parse::<Mechanism>().map_err(anyhow::Error::msg))
        .map(|m| {
            let m = m?;
            anyhow::ensure!(
                m != Mechanism::Plain,
                "PLAIN uses the SCRAM credentials; name a SCRAM mechanism"
            );
            anyhow::ensure!(
                m != Mechanism::OAuthBearer,
                "OAUTHBEARER has no stored credentials (tokens are checked against the JWKS); name a SCRAM mechanism"
            );
            Ok(m)
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let UsersCommand::Create {
        name,
        password,
        mechanisms,
        iterations,
        data_dir: Some(dir),
    } = &args.command
    {
        return create_offline(dir, name, password, mechanisms, *iterations);
    }
    block_on(async move {
        let admin = Admin::new(args.conn.client_config());
        let bootstrap = args
            .conn
            .bootstrap
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let conn = admin
            .cluster()
            .connection_to(&bootstrap)
            .await
            .with_context(|| format!("connecting to {bootstrap}"))?;
        match args.command {
            UsersCommand::Create {
                name,
                password,
                mechanisms,
                iterations,
                data_dir: _,
            } => {
                let mut req = AlterUserScramCredentialsRequest::default();
                for m in scram_mechanisms(&mechanisms)? {
                    let salt: [u8; SALT_BYTES] = scram::new_salt();
                    let salted = scram::salted_password(m, password.as_bytes(), &salt, iterations);
                    let mut u = ScramCredentialUpsertion::default();
                    u.name = s(&name);
                    u.mechanism = m.scram_type();
                    u.iterations = iterations as i32;
                    u.salt = salt.to_vec().into();
                    u.salted_password = salted.into();
                    req.upsertions.push(u);
                }
                alter(&conn, req, &name, "created").await
            }
            UsersCommand::Delete { name, mechanisms } => {
                let mut req = AlterUserScramCredentialsRequest::default();
                for m in scram_mechanisms(&mechanisms)? {
                    // Only the mechanisms the user has: deleting a missing one is an error.
                    let mut d = ScramCredentialDeletion::default();
                    d.name = s(&name);
                    d.mechanism = m.scram_type();
                    req.deletions.push(d);
                }
                let have = describe(&conn).await?;
                let has: Vec<i8> = have
                    .iter()
                    .filter(|(u, _)| *u == name)
                    .flat_map(|(_, c)| c.iter().map(|(m, _)| *m))
                    .collect();
                anyhow::ensure!(!has.is_empty(), "user {name} does not exist");
                req.deletions.retain(|d| has.contains(&d.mechanism));
                alter(&conn, req, &name, "deleted").await
            }
            UsersCommand::List => {
                let users = describe(&conn).await?;
                if args.conn.json {
                    let rows: Vec<_> = users.iter().map(|(u, c)| json!({"user": u, "credentials": c.iter().map(|(m, i)| json!({"mechanism": mech_name(*m), "iterations": i})).collect::<Vec<_>>()})).collect();
                    print_json(&json!(rows));
                    return Ok(());
                }
                let rows: Vec<Vec<String>> = users
                    .iter()
                    .map(|(u, c)| {
                        let m: Vec<String> = c
                            .iter()
                            .map(|(m, i)| format!("{}({i})", mech_name(*m)))
                            .collect();
                        vec![u.clone(), m.join(",")]
                    })
                    .collect();
                print_table(&["USER", "MECHANISMS(ITERATIONS)"], &rows);
                Ok(())
            }
        }
    })
}

/// `users create --data-dir`: the credential written into a stopped broker's store (its data
/// dir lock is taken, so a running broker is refused).
fn create_offline(
    dir: &std::path::Path,
    name: &str,
    password: &str,
    mechanisms: &str,
    iterations: u32,
) -> anyhow::Result<()> {
    use streamforge_broker::security::credentials::CredentialStore;
    let _lock = streamforge_broker::data_dir_lock::DataDirLock::acquire(dir)
        .with_context(|| format!("{} (is its broker running?)", dir.display()))?;
    let store = CredentialStore::open(dir).with_context(|| dir.display().to_string())?;
    let mut upserts = Vec::new();
    for m in scram_mechanisms(mechanisms)? {
        let cred = scram::new_credential(m, password, iterations).map_err(anyhow::Error::msg)?;
        upserts.push((name.to_string(), m, cred));
    }
    store
        .apply(upserts, Vec::new())
        .with_context(|| dir.display().to_string())?;
    println!("user {name} created in {}", dir.display());
    Ok(())
}

fn mech_name(t: i8) -> &'static str {
    Mechanism::scram_from_type(t)
        .map(Mechanism::name)
        .unwrap_or("UNKNOWN")
}

async fn alter(
    conn: &streamforge_client::conn::Connection,
    req: AlterUserScramCredentialsRequest,
    name: &str,
    what: &str,
) -> anyhow::Result<()> {
    let resp = conn.send(&req, 0).await?;
    for r in resp.results {
        if r.error_code != 0 {
            let msg = r.error_message.map(|m| m.to_string()).unwrap_or_default();
            anyhow::bail!("user {}: error {}: {msg}", r.user.as_str(), r.error_code);
        }
    }
    println!("user {name} {what}");
    Ok(())
}

type Described = Vec<(String, Vec<(i8, i32)>)>;

async fn describe(conn: &streamforge_client::conn::Connection) -> anyhow::Result<Described> {
    let mut req = DescribeUserScramCredentialsRequest::default();
    req.users = None;
    let resp = conn.send(&req, 0).await?;
    anyhow::ensure!(
        resp.error_code == 0,
        "describe users: error {}",
        resp.error_code
    );
    Ok(resp
        .results
        .into_iter()
        .map(|r| {
            let creds = r
                .credential_infos
                .iter()
                .map(|c| (c.mechanism, c.iterations))
                .collect();
            (r.user.to_string(), creds)
        })
        .collect())
}
