//! Items run straight through a store or a stack, for tests and benches
//! that drive a store without an engine: one [`Work`] per call, every
//! answer the store's own decision.

use async_trait::async_trait;

use super::{Answer, Decided, Item, Policy, Store, StoreError, StoreErrorKind, StoreExt, Work};

/// What a store decided for each item of one work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// One per item, in the work's order.
    pub results: Vec<Decided>,
    /// Whether the items taken on commit were taken.
    pub committed: bool,
}

/// One work of `items` under a policy, on any store or stack.
#[async_trait]
pub trait RunItems: Store {
    /// Runs `items` under `policy`. The first item the store did not decide
    /// (its error, or an answer by a failure policy) is the call's error.
    async fn run(&self, items: &[Item], policy: Policy) -> Result<Ran, StoreError> {
        let reply = self.execute(&Work::new(items.to_vec(), policy), None).await;
        let results = reply
            .answers
            .into_iter()
            .map(|a| match a? {
                Answer::Decided(d) => Ok(d),
                Answer::ByPolicy(p) => Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!("answered by a failure policy: {p:?}"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Ran {
            results,
            committed: reply.committed,
        })
    }

    /// [`RunItems::run`], and each item's count after it (a counter's
    /// value).
    async fn counts(&self, items: &[Item], policy: Policy) -> Result<Vec<u64>, StoreError> {
        let ran = self.run(items, policy).await?;
        Ok(ran.results.into_iter().map(|d| d.count).collect())
    }
}

impl<S: Store + ?Sized> RunItems for S {}
