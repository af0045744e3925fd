//! `relay-tool`: what admins run against an mbx-relay store.
fn main() {
    eprintln!("relay-tool: not yet implemented");
    std::process::exit(2);
}
