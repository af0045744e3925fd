//! Statements prepared once per connection (deadpool's statement cache) and then run: one
//! round trip each, where an unprepared statement costs a Parse round trip first and a Close
//! when it is dropped. For every client, a pooled connection and a transaction alike.

use std::future::Future;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row};

/// The statement parameters, as tokio-postgres takes them.
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// `query`, `query_one`, `query_opt` and `execute` of `sql` prepared once per connection.
/// (The futures are `Send`, as the operations' bodies must be.)
pub(crate) trait Cached: GenericClient {
    /// Every row `sql` answers.
    fn query_cached<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send + 'a {
        async move { self.query(&self.prepare_cached(sql).await?, params).await }
    }

    /// The one row `sql` answers (an error for none or more).
    fn query_one_cached<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Row, Error>> + Send + 'a {
        async move {
            self.query_one(&self.prepare_cached(sql).await?, params)
                .await
        }
    }

    /// The row `sql` answers, if any (an error for more than one).
    fn query_opt_cached<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send + 'a {
        async move {
            self.query_opt(&self.prepare_cached(sql).await?, params)
                .await
        }
    }

    /// How many rows `sql` wrote.
    fn execute_cached<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<u64, Error>> + Send + 'a {
        async move { self.execute(&self.prepare_cached(sql).await?, params).await }
    }
}

impl<C: GenericClient> Cached for C {}
