//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`: Envoy's
//! `rate_limit_quota` filter reports each bucket's usage on one stream and
//! is told how to enforce it ([`crate::quota`] decides what).
//!
//! Every report is answered at once, one action per bucket it carries,
//! and a bucket whose share moved (another Envoy arrived, left or changed
//! its demand) is sent its new assignment when it moves, between reports.
//! A malformed report ends the stream with `INVALID_ARGUMENT`. When this
//! instance stops, every bucket of every open stream is sent its assignment
//! with a TTL of zero (Envoy then applies its
//! `expired_assignment_behavior` at once and reconnects to another
//! instance), and the stream ends.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, Strategy as PbStrategy,
};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    bucket_action::{AbandonAction, BucketAction as PbAction, QuotaAssignmentAction},
    BucketAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use crate::quota::{Action, Quotas, Session, Strategy, Usage};

/// The RLQS service.
#[derive(Debug, Clone)]
pub struct QuotaService {
    quotas: Quotas,
    /// Becomes true when the instance stops.
    stopping: watch::Receiver<bool>,
}

impl QuotaService {
    /// The service of `quotas`.
    pub fn new(quotas: Quotas, stopping: watch::Receiver<bool>) -> QuotaService {
        QuotaService { quotas, stopping }
    }

    /// The tonic server of it, with `max_message` bytes per message.
    pub fn server(self, max_message: usize) -> RateLimitQuotaServiceServer<QuotaService> {
        RateLimitQuotaServiceServer::new(self)
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message)
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        let mut inbound = request.into_inner();
        let (mut session, mut pushes) = self.quotas.open();
        let mut stopping = self.stopping.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = inbound.message() => match message {
                        Ok(Some(reports)) => {
                            let answer = answer(&mut session, reports).await;
                            let failed = answer.is_err();
                            if tx.send(answer).await.is_err() || failed {
                                break;
                            }
                        }
                        Ok(None) | Err(_) => break,
                    },
                    Some(push) = pushes.recv() => {
                        if let Some((bucket, action)) = session.pushed(push) {
                            let pushed = response(std::iter::once((bucket, Some(action))));
                            if tx.send(Ok(pushed)).await.is_err() {
                                break;
                            }
                        }
                    }
                    _ = async {
                        // A sender gone without stopping never stops it.
                        if stopping.wait_for(|&s| s).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    } => {
                        let expired = session.expire_all();
                        if !expired.is_empty() {
                            let _ = tx.send(Ok(response(expired.into_iter().map(|(b, a)| (b, Some(a)))))).await;
                        }
                        break;
                    }
                }
            }
            session.close().await;
        });
        let answers =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|a| (a, rx)) });
        Ok(Response::new(Box::pin(answers)))
    }
}

/// The response to one report.
async fn answer(
    session: &mut Session,
    reports: RateLimitQuotaUsageReports,
) -> Result<RateLimitQuotaResponse, Status> {
    let usages = reports
        .bucket_quota_usages
        .into_iter()
        .map(|u| Usage {
            bucket: u
                .bucket_id
                .map(|b| b.bucket.into_iter().collect())
                .unwrap_or_default(),
            elapsed: u.time_elapsed.map(|d| {
                Duration::new(
                    d.seconds.max(0) as u64,
                    d.nanos.clamp(0, 999_999_999) as u32,
                )
            }),
            allowed: u.num_requests_allowed,
            denied: u.num_requests_denied,
        })
        .collect();
    let answers = session
        .report(&reports.domain, usages)
        .await
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(response(answers.into_iter()))
}

fn response(
    actions: impl Iterator<Item = (Vec<(String, String)>, Option<Action>)>,
) -> RateLimitQuotaResponse {
    RateLimitQuotaResponse {
        bucket_action: actions
            .filter_map(|(bucket, action)| {
                action.map(|a| BucketAction {
                    bucket_id: Some(BucketId {
                        bucket: bucket.into_iter().collect::<HashMap<_, _>>(),
                    }),
                    bucket_action: Some(to_proto(a)),
                })
            })
            .collect(),
    }
}

fn to_proto(action: Action) -> PbAction {
    match action {
        Action::Abandon => PbAction::AbandonAction(AbandonAction {}),
        Action::Assign { strategy, ttl } => {
            PbAction::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(duration(ttl)),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(match strategy {
                        Strategy::AllowAll => PbStrategy::BlanketRule(BlanketRule::AllowAll as i32),
                        Strategy::DenyAll => PbStrategy::BlanketRule(BlanketRule::DenyAll as i32),
                        Strategy::Bucket(b) => PbStrategy::TokenBucket(TokenBucket {
                            max_tokens: b.max_tokens,
                            tokens_per_fill: Some(UInt32Value {
                                value: b.tokens_per_fill,
                            }),
                            fill_interval: Some(duration(Duration::from_secs(u64::from(
                                b.fill_interval_secs,
                            )))),
                        }),
                    }),
                }),
            })
        }
    }
}

fn duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}
