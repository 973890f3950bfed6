//! Unit tests against real fixtures (`$APIAGG_FIXTURES`, default `../../shared/fixtures`).

mod fixtures;

mod cbor;
mod convert;
mod merge;
mod negotiate;
mod order;
mod render;
mod roundtrip;
