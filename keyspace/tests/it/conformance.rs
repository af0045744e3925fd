//! The backend conformance suite (`relay_store::conformance`) on the fjall store: every rule a
//! `RelayStore` must obey, one test each, named after the rule.

use crate::common;

use common::FjallBackend;

relay_keyspace::conformance_tests!(FjallBackend::new());
