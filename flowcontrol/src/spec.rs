//! One priority level's spec after v1 defaulting and validation, and the uids of objects.

use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration;
use sha2::{Digest, Sha256};

use super::config::{invalid, PL};
use super::error::{ConfigError, FieldError};

/// Upper bound of `handSize × log2(queues)` (upstream `shufflesharding.MaxHashBits`).
const MAX_HASH_BITS: f64 = 60.0;

/// What a priority level does with requests beyond its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Never limited, never queued.
    Exempt,
    /// Rejected at once (`concurrency-limit`).
    Reject,
    /// Queued in a shuffle-sharded fair queue set.
    Queue {
        /// `queues`
        queues: u32,
        /// `handSize`
        hand_size: u32,
        /// `queueLengthLimit`
        queue_length_limit: u32,
    },
}

/// A priority level after defaulting and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelSpec {
    /// `metadata.name`
    pub name: String,
    /// `metadata.uid`, or one derived from the name.
    pub uid: String,
    /// `nominalConcurrencyShares` (v1 default 30).
    pub shares: u32,
    /// `lendablePercent` (default 0).
    pub lendable_percent: u32,
    /// `borrowingLimitPercent`; `None`: no limit (exempt levels never borrow).
    pub borrowing_limit_percent: Option<u32>,
    /// What happens beyond the limit.
    pub mode: Mode,
}

/// A percentage field: `0..=100` unless `unbounded`.
fn percent(field: &str, value: Option<i32>, unbounded: bool) -> Result<Option<u32>, FieldError> {
    match value {
        None => Ok(None),
        Some(v) if v < 0 || (!unbounded && v > 100) => Err(FieldError::invalid(
            field,
            v,
            "must be between 0 and 100, inclusive",
        )),
        Some(v) => Ok(u32::try_from(v).ok()),
    }
}

pub(super) fn level(
    name: String,
    pl: &PriorityLevelConfiguration,
) -> Result<LevelSpec, ConfigError> {
    let bad = |error: FieldError| invalid(PL, &name, error);
    let spec = pl
        .spec
        .as_ref()
        .ok_or_else(|| bad(FieldError::required("spec")))?;
    let uid = uid_of(PL, &name, pl.metadata.uid.as_deref()).map_err(bad)?;
    // The shares with the field they come from, for a message about them.
    let (shares, lendable_percent, borrowing_limit_percent, mode) = match spec.type_.as_str() {
        "Exempt" => {
            if spec.limited.is_some() {
                return Err(bad(FieldError::forbidden(
                    "spec.limited",
                    "must be nil if the type is not Limited",
                )));
            }
            let exempt = spec.exempt.clone().unwrap_or_default();
            let shares = exempt.nominal_concurrency_shares.unwrap_or(0);
            let lendable = percent(
                "spec.exempt.lendablePercent",
                exempt.lendable_percent,
                false,
            );
            let shares = ("spec.exempt.nominalConcurrencyShares", shares);
            (shares, lendable.map_err(bad)?, Some(0), Mode::Exempt)
        }
        "Limited" => {
            if spec.exempt.is_some() {
                return Err(bad(FieldError::forbidden(
                    "spec.exempt",
                    "must be nil if the type is Limited",
                )));
            }
            let limited = spec
                .limited
                .as_ref()
                .ok_or_else(|| bad(FieldError::required("spec.limited")))?;
            let lendable = percent(
                "spec.limited.lendablePercent",
                limited.lendable_percent,
                false,
            );
            let borrowing = percent(
                "spec.limited.borrowingLimitPercent",
                limited.borrowing_limit_percent,
                true,
            );
            let response = limited
                .limit_response
                .as_ref()
                .ok_or_else(|| bad(FieldError::required("spec.limited.limitResponse")))?;
            let queuing_field = "spec.limited.limitResponse.queuing";
            let mode = match (response.type_.as_str(), &response.queuing) {
                ("Reject", None) => Mode::Reject,
                ("Reject", Some(_)) => {
                    return Err(bad(FieldError::forbidden(
                        queuing_field,
                        "must be nil if limited.limitResponse.type is not Limited",
                    )))
                }
                ("Queue", None) => {
                    return Err(bad(FieldError::required_because(
                        queuing_field,
                        "must not be empty if limited.limitResponse.type is Limited",
                    )))
                }
                ("Queue", Some(q)) => {
                    queuing(q.queues, q.hand_size, q.queue_length_limit).map_err(bad)?
                }
                (other, _) => {
                    return Err(bad(FieldError::unsupported(
                        "spec.limited.limitResponse.type",
                        other,
                        &["Queue", "Reject"],
                    )))
                }
            };
            let shares = limited.nominal_concurrency_shares.unwrap_or(30);
            let shares = ("spec.limited.nominalConcurrencyShares", shares);
            (
                shares,
                lendable.map_err(bad)?,
                borrowing.map_err(bad)?,
                mode,
            )
        }
        other => {
            return Err(bad(FieldError::unsupported(
                "spec.type",
                other,
                &["Exempt", "Limited"],
            )))
        }
    };
    let (shares_field, shares) = shares;
    let shares = u32::try_from(shares).map_err(|_| {
        bad(FieldError::invalid(
            shares_field,
            shares,
            "must be a non-negative integer",
        ))
    })?;
    Ok(LevelSpec {
        name,
        uid,
        shares,
        lendable_percent: lendable_percent.unwrap_or(0),
        borrowing_limit_percent,
        mode,
    })
}

/// Validates queuing (v1 defaults: 64 queues, hand size 8, 50 per queue).
fn queuing(queues: Option<i32>, hand: Option<i32>, limit: Option<i32>) -> Result<Mode, FieldError> {
    let field = |name: &str| format!("spec.limited.limitResponse.queuing.{name}");
    let positive = |name: &str, value: Option<i32>, default: u32| match value {
        None | Some(0) => Ok(default),
        Some(v) => {
            u32::try_from(v).map_err(|_| FieldError::invalid(field(name), v, "must be positive"))
        }
    };
    let queues = positive("queues", queues, 64)?;
    let hand_size = positive("handSize", hand, 8)?;
    let queue_length_limit = positive("queueLengthLimit", limit, 50)?;
    if hand_size > queues {
        return Err(FieldError::invalid(
            field("handSize"),
            hand_size,
            format!("should not be greater than queues ({queues})"),
        ));
    }
    let bits = (f64::from(queues).log2() * f64::from(hand_size)).ceil();
    if bits > MAX_HASH_BITS {
        return Err(FieldError::invalid(
            field("handSize"),
            hand_size,
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand_size} should \
                 not be greater than {MAX_HASH_BITS}"
            ),
        ));
    }
    Ok(Mode::Queue {
        queues,
        hand_size,
        queue_length_limit,
    })
}

/// The object's uid, or a stable one derived from its kind and name (built-in and file objects
/// have none; the real ones are UUIDs).
pub(super) fn uid_of(kind: &str, name: &str, given: Option<&str>) -> Result<String, FieldError> {
    match given {
        Some(uid) if !uid.is_empty() => {
            if uid.bytes().all(|b| b.is_ascii_graphic()) {
                Ok(uid.to_string())
            } else {
                Err(FieldError::invalid(
                    "metadata.uid",
                    uid,
                    "must be printable ASCII",
                ))
            }
        }
        _ => Ok(derived_uid(kind, name)),
    }
}

/// A UUID-shaped (version 8, RFC 9562 "custom") id from SHA-256 of `apiagg/<kind>/<name>`.
pub fn derived_uid(kind: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("apiagg/{kind}/{name}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
