//! What the operator does to a site, over a fresh connection bounded by a
//! timeout, with the statements of `statements` for the site's flavour.
//! Used by primary reassertion now and by the failover engine next.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::observation::Flavor;
use super::probe::{Credentials, ProbeError, ProbeTarget, connect};
use super::statements;

/// What a fence did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fenced {
    /// Client sessions ended: `(id, user)`.
    pub killed: Vec<(u64, String)>,
}

/// Fences a site: read-only (`read_only` on MariaDB, `super_read_only` on
/// MySQL), then ends every client session but its own — on MariaDB
/// `read_only` does not stop accounts with `READ_ONLY ADMIN` (root among
/// them), so ending sessions is part of the fence. The whole is bounded by
/// `timeout` (a long transaction holding the global read lock makes
/// `SET GLOBAL read_only` wait).
pub async fn fence(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    timeout: Duration,
) -> Result<Fenced, ProbeError> {
    let run = async {
        let mut conn = connect(target, creds).await?;
        for stmt in statements::fence(flavor) {
            conn.query_drop(*stmt).await?;
        }
        let sessions: Vec<(u64, String, u64)> = conn.query(statements::CLIENT_SESSIONS).await?;
        let mut killed = Vec::new();
        for (id, user, _) in sessions {
            match conn.query_drop(statements::kill(id)).await {
                Ok(()) => killed.push((id, user)),
                // ER_NO_SUCH_THREAD: it ended by itself meanwhile.
                Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let _ = conn.disconnect().await;
        Ok(Fenced { killed })
    };
    tokio::time::timeout(timeout, run).await.unwrap_or(Err(ProbeError::Timeout(timeout)))
}
