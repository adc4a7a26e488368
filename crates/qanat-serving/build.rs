fn main() {
    // New migration files must trigger a rebuild of the embedded migrations.
    println!("cargo:rerun-if-changed=migrations");
}
