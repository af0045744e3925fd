//! The `mbx-relay` command.
fn main() {
    eprintln!("mbx-relay: not yet implemented");
    std::process::exit(2);
}
