//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds
//! `migrations/` at compile time but only tracks the files it saw (sqlx docs, "migrate!").
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
