//! An item's kind as it is stored (`items.kind`, a `SMALLINT`): written by inserts, read by
//! pulls, sweeps, purges and rotations.

use relay_store::{ItemKind, Result, StoreError};

/// The stored code of `k`.
pub(crate) fn kind_code(k: ItemKind) -> i16 {
    match k {
        ItemKind::Envelope => 0,
        ItemKind::Receipt => 1,
        ItemKind::Expired => 2,
    }
}

/// The kind a stored code names (`Corrupt` for a code this binary never writes).
pub(crate) fn kind_of(code: i16) -> Result<ItemKind> {
    match code {
        0 => Ok(ItemKind::Envelope),
        1 => Ok(ItemKind::Receipt),
        2 => Ok(ItemKind::Expired),
        other => Err(StoreError::Corrupt(format!("item kind {other} is unknown"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written_and_an_unknown_code_is_corrupt() {
        for k in [ItemKind::Envelope, ItemKind::Receipt, ItemKind::Expired] {
            assert_eq!(kind_of(kind_code(k)).unwrap(), k);
        }
        assert!(matches!(kind_of(3), Err(StoreError::Corrupt(_))));
    }
}
