//! The backend conformance suite (`relay_store::conformance`) on PostgreSQL: every rule a
//! `RelayStore` must obey, one test each, each on its own throwaway cluster (skipped, with a
//! line saying so, where the PostgreSQL binaries are missing).

use std::path::Path;
use std::sync::Arc;

use relay_pgstore::{PgStore, PG_SCHEMA_VERSION};
use relay_store::conformance::Backend;
use relay_store::{Clock, OpenOptions, RelayStore, SharedStore};
use relay_testkit::cluster::PgCluster;

/// One database on its own cluster.
struct PgBackend {
    cluster: PgCluster,
    url: String,
}

impl PgBackend {
    fn new() -> PgBackend {
        let Some(cluster) = PgCluster::start_or_skip("conformance") else {
            // Not a skipped assertion: without the binaries there is no backend to check, and
            // .ci/run installs them.
            panic!("PostgreSQL server binaries are required for the conformance suite");
        };
        let url = cluster.fresh_db();
        PgBackend { cluster, url }
    }
}

impl Backend for PgBackend {
    fn open(&self, clock: Arc<dyn Clock>) -> SharedStore {
        self.open_keeping(clock, relay_store::LogRetention::default())
    }
    fn open_keeping(&self, clock: Arc<dyn Clock>, keep: relay_store::LogRetention) -> SharedStore {
        let opts = OpenOptions {
            clock,
            log_retention: keep,
            ..OpenOptions::default()
        };
        Arc::new(PgStore::open(&self.url, opts).expect("open the postgres store"))
    }
    fn schema_version(&self) -> u32 {
        PG_SCHEMA_VERSION
    }
    /// Counters and indexes against a recount (one fresh handle on the same database).
    fn check_invariants(&self, _store: &dyn RelayStore) {
        let s = PgStore::open(&self.url, OpenOptions::default()).expect("open for the check");
        let errors = s
            .bookkeeping_errors_for_tests()
            .expect("bookkeeping check runs");
        assert!(errors.is_empty(), "bookkeeping: {errors:?}");
        RelayStore::close(&s).expect("close");
    }
    /// Into a new database of the same cluster, checked by the bookkeeping recount.
    fn restore(&self, file: &Path, clock: Arc<dyn Clock>) -> SharedStore {
        let url = self.cluster.fresh_db();
        PgStore::restore_backup(&url, file).expect("restore");
        let s = PgStore::open(&url, OpenOptions::default()).expect("open for the check");
        let errors = s
            .bookkeeping_errors_for_tests()
            .expect("bookkeeping check runs");
        assert!(
            errors.is_empty(),
            "bookkeeping after the restore: {errors:?}"
        );
        RelayStore::close(&s).expect("close");
        let opts = OpenOptions {
            clock,
            ..OpenOptions::default()
        };
        Arc::new(PgStore::open(&url, opts).expect("open the restored store"))
    }
    fn try_restore(&self, file: &Path) -> Result<(), relay_store::BackupError> {
        PgStore::restore_backup(&self.cluster.fresh_db(), file).map(|_| ())
    }
}

relay_store::conformance_tests!(PgBackend::new());
