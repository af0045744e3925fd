//! An operation's errors: a database error (maybe retryable, which `crate::db` decides) or a
//! store error, and the one text a database error is reported with (the server's reason, or
//! the client's error with its causes; never row data).

use relay_store::StoreError;

/// An error inside an operation: a database error (maybe retryable) or a store error.
pub(crate) enum OpError {
    Db(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for OpError {
    fn from(e: tokio_postgres::Error) -> Self {
        OpError::Db(e)
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        OpError::Store(e)
    }
}

/// What an operation body returns.
pub(crate) type OpResult<T> = std::result::Result<T, OpError>;

impl From<OpError> for StoreError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Db(e) => db_err(e),
            OpError::Store(e) => e,
        }
    }
}

/// Map a client error to a store error (the text names the server's reason, or the client's
/// error with its causes, e.g. `error connecting to server: Connection refused (os error 111)`;
/// no row data).
pub(crate) fn db_err(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(d) => StoreError::Engine(format!("postgres: {} ({})", d.message(), d.code().code())),
        None => StoreError::Engine(format!("postgres: {}", with_causes(&e))),
    }
}

/// Most causes named after an error (a bound on the text).
const MAX_CAUSES: usize = 4;

/// `error: cause: its cause ...`: tokio-postgres's own text names only the kind of failure.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    for _ in 0..MAX_CAUSES {
        let Some(c) = cause else { break };
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
