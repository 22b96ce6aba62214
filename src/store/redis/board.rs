//! The RLQS demand board on Redis: one hash per quota, changed by one
//! atomic script (`board.lua`), so every instance on one Redis (or Redis
//! Cluster: a board is one key, on one slot) splits one limit.

use std::time::Duration;

use async_trait::async_trait;
use fred::clients::Pool;
use fred::interfaces::{HashesInterface, LuaInterface};
use fred::types::scripts::Script;

use crate::store::board::{BoardError, DemandBoard, Exchanged};

/// The script text.
pub const BOARD: &str = include_str!("board.lua");

/// The boards of one Redis deployment.
#[derive(Debug, Clone)]
pub struct RedisBoard {
    pool: Pool,
    script: Script,
}

impl RedisBoard {
    /// Boards on `pool`'s deployment.
    pub fn new(pool: Pool) -> RedisBoard {
        RedisBoard {
            pool,
            script: Script::from_lua(BOARD),
        }
    }
}

fn board_error(e: &fred::error::Error) -> BoardError {
    BoardError(e.to_string())
}

#[async_trait]
impl DemandBoard for RedisBoard {
    async fn exchange(
        &self,
        quota: &str,
        me: &str,
        demand: f64,
        want: Option<f64>,
        rate: f64,
        ttl: Duration,
    ) -> Result<Exchanged, BoardError> {
        let client = self.pool.next();
        let argv = vec![
            me.to_string(),
            format!("{demand:.6}"),
            want.map(|w| format!("{w:.6}")).unwrap_or_default(),
            format!("{rate:.6}"),
            ttl.as_millis().max(1).to_string(),
        ];
        let keys = vec![quota.to_string()];
        let sent: Result<Vec<String>, _> = client
            .evalsha(self.script.sha1().clone(), keys.clone(), argv.clone())
            .await;
        let values = match sent {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                self.script
                    .load(client)
                    .await
                    .map_err(|e| board_error(&e))?;
                client.evalsha(self.script.sha1().clone(), keys, argv).await
            }
            other => other,
        }
        .map_err(|e| board_error(&e))?;
        let mut numbers = values.iter().map(|v| v.parse::<f64>());
        let assigned = numbers
            .next()
            .and_then(Result::ok)
            .ok_or_else(|| BoardError("unexpected reply from the board script".into()))?;
        let others = numbers.filter_map(Result::ok).collect();
        Ok(Exchanged { assigned, others })
    }

    async fn leave(&self, quota: &str, me: &str) -> Result<(), BoardError> {
        let client = self.pool.next();
        let _: i64 = client.hdel(quota, me).await.map_err(|e| board_error(&e))?;
        Ok(())
    }
}
