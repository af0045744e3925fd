//! Writes the committed seed corpora under `fuzz/corpus/<target>/` (see `src/seeds.rs`).
//! Run from `fuzz/`: `cargo run --example make_seeds`.

fn main() {
    let backup = mbx_relay_fuzz::seeds::write_all(std::path::Path::new("corpus"));
    println!("seeds written; the backup seed is {} bytes", backup.len());
}
